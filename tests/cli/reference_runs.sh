#!/usr/bin/env bash
# Reference runs that hold the trainer's behaviour: a language model and a translation model,
# each at 2 ranks under mpirun with accumulation (--update-freq 2), a synchronized norm beside
# rank-local ones, validation and a save. Their metrics lines (minus the wall-clock fields) and
# their last checkpoint are compared with those in tests/reference/runs/<arch>/ by
# tests/cli/reference_compare.py: byte for byte on the CPU the reference was recorded on
# (tests/reference/cpu.txt: its model name, family, model and vector instruction sets, since one
# model name, "AMD EPYC" say, covers CPUs with and without AVX-512), within the tolerances stated
# there on any other (OpenBLAS and oneDNN pick their kernels by CPU, so sums run in another
# order). A checkpoint header is compared as options: an
# option added later that changes nothing passes, one whose value changed fails. Each run also
# checks the comparison itself (edited copies of the reference must fail, or pass).
# Usage: reference_runs.sh REPO_ROOT PNTRAIN MPIRUN... ; REFERENCE_RECORD=1 rewrites the
# references; PN_REFERENCE_MODE=tolerance compares within tolerance even on the recorded CPU.
set -u
root="$1" pntrain="$2"; shift 2
mpirun=("$@")
ref="$root/tests/reference"
py=$(command -v python3) || { echo "skipped: no python3"; exit 77; }
field() { sed -n "s/^$1[[:space:]]*: //p" /proc/cpuinfo | head -1; }
isa=$(field flags | tr ' ' '\n' | grep -E '^(avx|amx|fma)' | sort | tr '\n' ' ' | sed 's/ $//')
cpu="$(field 'model name'); family $(field 'cpu family'), model $(field model); $isa"
mode=--exact
if [ "${PN_REFERENCE_MODE:-}" = tolerance ] || [ "$cpu" != "$(cat "$ref/cpu.txt")" ]; then
  mode=--tolerance
  echo "this CPU is '$cpu', the reference's '$(cat "$ref/cpu.txt")'${PN_REFERENCE_MODE:+ (PN_REFERENCE_MODE=$PN_REFERENCE_MODE)}: comparing within tolerance"
fi
compare="$root/tests/cli/reference_compare.py"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
common=(--max-update 6 --update-freq 2 --max-tokens 128 --dropout 0.1 --seed 3 --lr 3e-3
        --warmup-updates 2 --validate-interval-updates 3 --save-interval-updates 3
        --log-interval 1 --threads 1)
lm=(--decoder-layers 1 --decoder-embed-dim 32 --decoder-attention-heads 2
    --decoder-ffn-embed-dim 64 --tokens-per-sample 32 --norm-self power --norm-ff sync_batch
    --norm-final layer)
mt=(--arch transformer --data "$ref/mt" --source-lang de --target-lang en
    --share-all-embeddings --encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 16
    --decoder-embed-dim 16 --encoder-attention-heads 2 --decoder-attention-heads 2
    --encoder-ffn-embed-dim 32 --decoder-ffn-embed-dim 32 --encoder-norm-self power
    --encoder-norm-ff sync_power --attention-dropout 0.1)

failures=0
for arch in lm mt; do
  if [ $arch = lm ]; then flags=("${lm[@]}"); else flags=("${mt[@]}"); fi
  out=$(timeout 300 "${mpirun[@]}" -np 2 "$pntrain" "${common[@]}" "${flags[@]}" \
          --save-dir "$tmp/$arch" --metrics "$tmp/$arch.jsonl" 2>&1) ||
    { echo "FAIL: the $arch reference run: exit $?"; echo "$out" | tail -5; failures=$((failures+1)); continue; }
  if [ "${REFERENCE_RECORD:-0}" = 1 ]; then
    "$py" "$compare" record "$tmp/$arch.jsonl" "$tmp/$arch/checkpoint_6" "$ref/runs/$arch"
    echo "$cpu" >"$ref/cpu.txt"; echo "recorded $ref/$arch"
    continue
  fi
  if ! "$py" "$compare" compare "$tmp/$arch.jsonl" "$tmp/$arch/checkpoint_6" "$ref/runs/$arch" $mode; then
    echo "FAIL: the $arch reference run differs from tests/reference/runs/$arch (${mode#--})"; failures=$((failures+1))
  else
    echo "ok: $arch: $(grep -c . "$ref/runs/$arch/metrics.jsonl") metrics lines and $(ls "$ref/runs/$arch/checkpoint" | wc -l) checkpoint files equal the reference (${mode#--})"
  fi
  if [ $mode = --exact ] && ! "$py" "$compare" compare "$tmp/$arch.jsonl" "$tmp/$arch/checkpoint_6" "$ref/runs/$arch" --tolerance; then
    echo "FAIL: the $arch run equals its reference byte for byte yet fails the tolerance comparison"; failures=$((failures+1))
  fi
  echo "the comparison itself, $arch:"
  "$py" "$compare" selfcheck "$tmp/$arch.jsonl" "$tmp/$arch/checkpoint_6" "$ref/runs/$arch" $mode ||
    { echo "FAIL: the $arch comparison does not see what it must"; failures=$((failures+1)); }
done

# Where --max-epoch ends a translation run (its epoch counts update batches, not samples): one
# epoch, then resumed to two, the updates of each "done" line.
mt_epochs() {
  local e out
  for e in 1 2; do
    out=$(timeout 300 "${mpirun[@]}" -np 2 "$pntrain" "${common[@]}" "${mt[@]}" --max-update 1000 \
            --max-epoch $e --validate-interval-updates 0 --save-dir "$tmp/epochs" 2>&1) ||
      { echo "run failed: exit $?"; echo "$out" | tail -3; return; }
    echo "--max-epoch $e: $(grep -o 'done | [0-9]*/[0-9]* updates' <<<"$out") $(grep -o 'reached --max-epoch [0-9]*' <<<"$out")"
  done
}
mt_epochs >"$tmp/mt_epochs.txt"
if [ "${REFERENCE_RECORD:-0}" = 1 ]; then
  cp "$tmp/mt_epochs.txt" "$ref/mt_epochs.txt"; echo "recorded $ref/mt_epochs.txt"
elif ! diff "$ref/mt_epochs.txt" "$tmp/mt_epochs.txt"; then
  echo "FAIL: --max-epoch ends the translation run elsewhere than tests/reference/mt_epochs.txt"
  failures=$((failures+1))
else
  echo "ok: --max-epoch ends translation runs where it did: $(tr '\n' ';' <"$tmp/mt_epochs.txt")"
fi
exit $failures
