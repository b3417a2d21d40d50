#!/usr/bin/env bash
# --precision bf16 on the CPU from the command line: refused on a CPU without AVX512_BF16 (the
# mask makes any CPU one) in one line naming the flag; with PN_BF16_EMULATE=1 a bf16 checkpoint
# resumes in fp32 and an fp32 one in bf16 (the precision of the resume's command); a 2-rank run
# with a synchronized norm in bf16 repeats itself bit for bit; tf32 on the CPU is refused.
# Usage: precision.sh PNTRAIN MPIRUN...
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
small=(--decoder-layers 1 --decoder-embed-dim 32 --decoder-attention-heads 2
       --decoder-ffn-embed-dim 64 --max-tokens 256 --threads 1 --log-interval 1)

out=$(PN_CPU_WITHOUT=avx512_bf16 "$pntrain" --cpu --bf16 "${small[@]}" --max-update 1 --save-dir M 2>&1)
rc=$?
[ "$rc" -eq 2 ] || fail "masked bf16: exit $rc: $out"
grep -q "needs the AVX512_BF16 instructions" <<<"$out" && grep -q "PN_BF16_EMULATE=1" <<<"$out" ||
  fail "masked bf16: the message does not name the flag and the way out: $out"
[ "$(grep -c . <<<"$out")" -eq 1 ] || fail "masked bf16: more than one line: $out"
[ ! -e M ] || fail "masked bf16: the refused run made its save directory"
out=$("$pntrain" --cpu --precision tf32 "${small[@]}" --max-update 1 2>&1) &&
  fail "tf32 on the CPU was accepted: $out"
grep -q "tf32 needs a GPU" <<<"$out" || fail "tf32 on the CPU: $out"

export PN_BF16_EMULATE=1
# bf16 -> fp32 and fp32 -> bf16 through a checkpoint: the resumed run continues from the saved
# update in the precision it was given, and its losses stay finite.
for pair in "bf16 fp32" "fp32 bf16"; do
  set -- $pair
  dir=CK_$1
  out=$("$pntrain" --cpu --precision "$1" "${small[@]}" --norm power --max-update 4 \
        --save-dir "$dir" 2>&1) || fail "$1 run: $out"
  [ "$1" != bf16 ] || grep -q "GEMMs in bf16" <<<"$out" || fail "no bf16 device line: $out"
  out=$("$pntrain" --cpu --precision "$2" --save-dir "$dir" --max-update 8 --metrics "m_$1.jsonl" 2>&1) ||
    fail "resume of $1 in $2: $out"
  grep -q "restored $dir/checkpoint_4" <<<"$out" || fail "$1 -> $2 did not resume: $out"
  # The precision is the machine's choice, as --device and --threads: the resume's own holds.
  if [ "$2" = bf16 ]; then grep -q "GEMMs in bf16" <<<"$out"; else ! grep -q "GEMMs in bf16" <<<"$out"; fi ||
    fail "$1 -> $2: the resume did not compute in $2: $(grep device: <<<"$out")"
  ! grep -q "flags other than its run's" <<<"$out" || fail "$1 -> $2: a warning: $out"
  "$py" - "m_$1.jsonl" <<'PY' || fail "$1 -> $2: metrics"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
ups = [r["update"] for r in rows]
assert ups == [5, 6, 7, 8], ups
assert all(math.isfinite(r["loss"]) and 0 < r["loss"] < 20 for r in rows), rows
PY
done

# Two ranks, sync_batch and sync_power, bf16: the same run twice gives the same losses and the
# same checkpoint parameters, bit for bit.
for run in 1 2; do
  "${mpirun[@]}" -np 2 -x PN_BF16_EMULATE "$pntrain" --cpu --bf16 "${small[@]}" --norm-self sync_batch \
    --norm-ff sync_power --max-update 5 --save-dir "S$run" --metrics "s$run.jsonl" > "s$run.log" 2>&1 ||
    fail "2-rank bf16 run $run: $(tail -5 s$run.log)"
done
"$py" - s1.jsonl s2.jsonl S1/checkpoint_5/model.bin S2/checkpoint_5/model.bin <<'PY' ||
import json, struct, sys
def losses(p):
    return [(r["update"], r["loss"], r["nll_loss"]) for r in map(json.loads, open(p)) if "loss" in r]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == 5 and a == b, (a, b)
def params(p):
    blob = open(p, "rb").read()
    (n,) = struct.unpack_from("<Q", blob, 8)
    return blob[16 + n:]
assert params(sys.argv[3]) == params(sys.argv[4]), "parameters differ"
print("2-rank bf16 runs equal: losses", [round(x[1], 6) for x in a])
PY
  fail "the 2-rank bf16 runs differ"

[ "$failures" -eq 0 ] && echo "precision: all checks passed"
exit $((failures > 0))
