#!/usr/bin/env bash
# Restarts at their edges, under mpirun -np 2: a resume from --save-dir whose newest checkpoint
# is damaged falls back to the newest one that verifies (one warning naming both) while an
# explicit --restore-file of it is refused naming the file; a --restore-file that does not exist
# names the checkpoints beside it; only rank-local norm state warns at another world size; an
# interrupt at a validation point saves first and the resumed run validates there, so its
# metrics equal an uninterrupted run's.
# Usage: restarts.sh PNTRAIN MPIRUN...
set -u
pntrain="$1"; shift
mpirun=("$@")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
small=(--decoder-embed-dim 32 --decoder-ffn-embed-dim 64 --decoder-layers 1 --max-tokens 256
       --tokens-per-sample 32 --validate-interval-updates 0 --log-interval 1 --threads 1)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures+1)); }
run() { out=$(timeout 300 "${mpirun[@]}" -np 2 "$pntrain" "${small[@]}" "$@" 2>&1); rc=$?; }
run1() { out=$(timeout 300 "$pntrain" "${small[@]}" "$@" 2>&1); rc=$?; }
first_error() { grep -m1 'pntrain: error' <<<"$out" | sed 's/^.*error[^:]*: //'; }

# 1. A damaged header in the newest checkpoint (bytes inside its JSON).
run --max-update 4 --save-interval-updates 2 --save-dir "$tmp/ck"
[ $rc -eq 0 ] && [ -e "$tmp/ck/checkpoint_4/DONE" ] || { fail "first run: exit $rc"; echo "$out" | tail -3; }
printf '##' | dd of="$tmp/ck/checkpoint_4/model.bin" bs=1 seek=40 conv=notrunc 2>/dev/null
run --max-update 6 --save-dir "$tmp/ck" --restore-file "$tmp/ck/checkpoint_4"
if [ $rc -eq 0 ] || ! grep -q "pntrain: error: checkpoint file '$tmp/ck/checkpoint_4/model.bin' is corrupt" <<<"$out" ||
   grep -q "json.exception" <<<"$out"; then
  fail "explicit --restore-file of a damaged header: exit $rc"; echo "$out" | tail -3
else echo "ok: --restore-file of a damaged header -> $(first_error)"; fi
run --max-update 6 --save-dir "$tmp/ck"
warnings=$(grep -c "fails verification" <<<"$out")
if [ $rc -ne 0 ] || [ "$warnings" -ne 1 ] ||
   ! grep -q "the newest checkpoint $tmp/ck/checkpoint_4 fails verification: checkpoint file '$tmp/ck/checkpoint_4/model.bin' is corrupt (CRC32 mismatch); resuming from $tmp/ck/checkpoint_2" <<<"$out" ||
   ! grep -q "restored $tmp/ck/checkpoint_2 at update 2" <<<"$out"; then
  fail "resume past a damaged newest checkpoint: exit $rc, $warnings warnings"; echo "$out" | tail -5
else echo "ok: resume from --save-dir -> $(grep -m1 'fails verification' <<<"$out" | sed 's/^.*\] //')"; fi

# 2. --restore-file of a path that does not exist.
run --max-update 6 --restore-file "$tmp/ck/checkpoint_8"
if [ $rc -eq 0 ] || ! grep -q "pntrain: error: --restore-file '$tmp/ck/checkpoint_8': there is no checkpoint there (no such file or directory); '$tmp/ck' holds checkpoint_2, checkpoint_4 and checkpoint_6" <<<"$out"; then
  fail "missing --restore-file: exit $rc"; echo "$out" | tail -3
else echo "ok: missing --restore-file -> $(first_error)"; fi

# 3. Another world size: the mean of rank-local state is announced for PN, not for LayerNorm.
for norm in layer power; do
  run --norm $norm --max-update 2 --save-dir "$tmp/ws_$norm"
  run1 --norm $norm --max-update 3 --save-dir "$tmp/ws_$norm"
  said=$(grep -c "rank-local norm state starts from the mean" <<<"$out")
  want=$([ $norm = power ] && echo 1 || echo 0)
  if [ $rc -ne 0 ] || [ "$said" -ne "$want" ] || ! grep -q "restored .*checkpoint_2" <<<"$out"; then
    fail "$norm saved by 2 ranks, resumed by 1: exit $rc, $said warnings (want $want)"; echo "$out" | tail -3
  else echo "ok: $norm saved by 2 ranks, resumed by 1: $said warning(s) of rank-local state"; fi
done

# 4. SIGTERM at an update that validates: the checkpoint comes first, the resumed run validates.
records() {  # the metrics lines without wall-clock fields and the attempts' start and end
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    if "event" in j:
        continue
    for k in ("wall_s", "tokens_per_s", "time", "peak_rss_mb"): j.pop(k, None)
    print(json.dumps(j, sort_keys=True))' "$1"
}
val=(--max-update 6 --validate-interval-updates 3 --dropout 0.1)
run "${val[@]}" --metrics "$tmp/straight.jsonl"
cut=("${val[@]}" --metrics "$tmp/cut.jsonl" --save-dir "$tmp/ck_val" --debug-fault sigterm@3:1)
run "${cut[@]}"
if [ $rc -ne 143 ] || ! grep -q "interrupted (SIGTERM) at update 3" <<<"$out" ||
   [ ! -e "$tmp/ck_val/checkpoint_3/DONE" ] || grep -q '"valid_loss"' "$tmp/cut.jsonl"; then
  fail "SIGTERM at a validation point: exit $rc"; echo "$out" | tail -3
fi
run "${cut[@]}"
if [ $rc -ne 0 ] || ! grep -q "valid | update 3 " <<<"$out"; then
  fail "the resumed run did not validate at update 3: exit $rc"; echo "$out" | tail -3
elif ! diff <(records "$tmp/straight.jsonl") <(records "$tmp/cut.jsonl"); then
  fail "interrupted at a validation point and resumed: metrics differ from an uninterrupted run"
else echo "ok: SIGTERM at update 3 (a validation point) -> saved, the resumed run validated at 3; $(grep -c . "$tmp/cut.jsonl") metrics lines equal an uninterrupted run's"; fi
exit $failures
