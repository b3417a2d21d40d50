#!/usr/bin/env bash
# Failure handling under mpirun -np 2: a rank that dies or hangs ends the job with a
# message naming it and leaves no process behind; NaN updates are skipped, then fatal; ranks
# whose parameters diverge are caught; a checkpoint from another model shape is refused; a job
# stopped and continued (SIGSTOP, SIGCONT) goes on.
# Usage: failures.sh PNTRAIN MPIRUN...
set -u
pntrain="$1"; shift
mpirun=("$@")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
small=(--decoder-embed-dim 32 --max-tokens 256 --tokens-per-sample 32
       --validate-interval-updates 0 --log-interval 1)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures+1)); }
run() {  # run SECONDS ARGS... ; sets out, rc, secs
  local limit="$1"; shift
  local t0=$SECONDS
  out=$(timeout "$limit" "${mpirun[@]}" -np 2 "$pntrain" "${small[@]}" "$@" 2>&1); rc=$?
  secs=$((SECONDS - t0))
}
no_leftovers() {
  sleep 1
  if pgrep -f "$pntrain .*$1" >/dev/null; then fail "pntrain processes left after: $1"; pkill -9 -f "$pntrain .*$1"; fi
}

# 1. A rank that dies: the job ends, naming the rank, with nothing left running.
run 120 --max-update 20 --debug-fault exit@3:1
if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then fail "killed rank: exit $rc"; 
elif ! grep -qE "Process name: \[\[[0-9]+,[0-9]+\],1\]" <<<"$out"; then fail "killed rank: mpirun does not name rank 1"; echo "$out" | tail -8
else echo "ok: killed rank 1 -> exit $rc in ${secs}s: mpirun: $(grep -m1 -E 'Process name' <<<"$out" | xargs)"; fi
no_leftovers "exit@3:1"

# 2. A rank that hangs: its watchdog stops the job after --comm-timeout, naming it.
run 120 --max-update 20 --debug-fault hang@3:1 --comm-timeout 5
if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then fail "hung rank: exit $rc after ${secs}s"
elif ! grep -q "rank 1 made no progress for 5 s" <<<"$out"; then fail "hung rank: no message naming rank 1"; echo "$out" | tail -8
else echo "ok: hung rank 1 -> exit $rc in ${secs}s: $(grep -m1 'no progress' <<<"$out")"; fi
no_leftovers "hang@3:1"

# 3. One NaN update is skipped with a warning and training goes on; a run of them is fatal.
run 120 --max-update 6 --debug-fault nan@3
if [ $rc -ne 0 ] || ! grep -q "update 3: loss .* not finite; update skipped" <<<"$out"; then
  fail "NaN injection: exit $rc, want 0 and a skip warning"; echo "$out" | tail -5
else echo "ok: NaN at update 3 skipped, training finished"; fi
run 120 --max-update 6 --debug-fault nan@3 --max-bad-updates 1
if [ $rc -eq 0 ] || ! grep -q "pntrain: error: .*NaN/Inf for 1 updates in a row" <<<"$out"; then
  fail "NaN with --max-bad-updates 1: exit $rc"; echo "$out" | tail -5
else echo "ok: NaN with --max-bad-updates 1 -> $(grep -m1 'pntrain: error' <<<"$out")"; fi

# 4. Parameters that differ across ranks are caught by the consistency check, naming the tensor.
run 120 --max-update 6 --debug-fault perturb@2:1 --consistency-interval 2
if [ $rc -eq 0 ] || ! grep -q "pntrain: error: parameters differ across ranks at update 2: tensor 'layer_norm.bias' on rank 1" <<<"$out"; then
  fail "consistency: exit $rc"; echo "$out" | tail -5
else echo "ok: $(grep -m1 'pntrain: error' <<<"$out")"; fi

# 5. A save directory that cannot be written stops the run before training (tests/cli/new_user.sh
#    covers failed saves during training).
: > "$tmp/not_a_dir"
run 120 --max-update 3 --save-dir "$tmp/not_a_dir/ckpt"
if [ $rc -eq 0 ] || ! grep -q "pntrain: error: --save-dir .* cannot hold checkpoints" <<<"$out"; then
  fail "unwritable save dir: exit $rc"; echo "$out" | tail -5
else echo "ok: unwritable save dir -> $(grep -m1 'pntrain: error' <<<"$out")"; fi

# 6. A checkpoint from another model is refused, naming the flag and both values (checkpoints
#    without their flags are refused naming the tensor: tests/test_checkpoint.cpp).
run 120 --max-update 2 --save-dir "$tmp/ckpt"
run 120 --max-update 4 --save-dir "$tmp/ckpt" --decoder-ffn-embed-dim 48
if [ $rc -eq 0 ] || ! grep -q "pntrain: error: --decoder-ffn-embed-dim 48 disagrees with checkpoint .*(trained with --decoder-ffn-embed-dim 512)" <<<"$out"; then
  fail "mismatched checkpoint: exit $rc"; echo "$out" | tail -5
else echo "ok: mismatched checkpoint -> refused"; fi
# --eval-only reports valid and test perplexity of the last checkpoint.
run 120 --eval-only --save-dir "$tmp/ckpt"
if [ $rc -ne 0 ] || ! grep -qE "^eval \| update 2 \| valid loss [0-9.]+ ppl [0-9.]+ \| test loss" <<<"$out"; then
  fail "--eval-only: exit $rc"; echo "$out" | tail -5
else echo "ok: $(grep -m1 '^eval' <<<"$out")"; fi
# ... and a corrupt checkpoint is refused.
printf 'garbage' | dd of="$tmp/ckpt/checkpoint_2/rank1.bin" bs=1 seek=40 conv=notrunc 2>/dev/null
run 120 --max-update 4 --save-dir "$tmp/ckpt"
if [ $rc -eq 0 ] || ! grep -q "rank1.bin' is corrupt" <<<"$out"; then fail "corrupt checkpoint: exit $rc"; echo "$out" | tail -5
else echo "ok: corrupt checkpoint -> $(grep -m1 'is corrupt' <<<"$out" | sed 's/^.*error[^:]*: //')"; fi

# 7. A job stopped with SIGSTOP and resumed with SIGCONT (kill -STOP, a suspended Slurm job) goes
#    on to its end: the SIGCONT is not mpirun's notice, the stopped time is not a hang (the stop
#    outlasts --comm-timeout).
( timeout 120 "${mpirun[@]}" -np 2 "$pntrain" "${small[@]}" --max-update 400 --comm-timeout 3 \
    --seed 71 > "$tmp/stop.log" 2>&1; echo "rc=$?" >> "$tmp/stop.log" ) &
for _ in $(seq 50); do grep -q "^update 20/" "$tmp/stop.log" 2>/dev/null && break; sleep 0.2; done
ranks=$(pgrep -f "^$pntrain .*--seed 71" | tr '\n' ' ')
[ -n "$ranks" ] && kill -STOP $ranks; sleep 5; [ -n "$ranks" ] && kill -CONT $ranks
wait
if ! grep -q "^rc=0" "$tmp/stop.log" || ! grep -q "^done | 400/400" "$tmp/stop.log"; then
  fail "SIGSTOP and SIGCONT of ranks [$ranks] ended the job"; tail -5 "$tmp/stop.log"
else echo "ok: ranks $ranks stopped for 5 s (--comm-timeout 3) and continued: $(grep '^done' "$tmp/stop.log")"; fi
exit $failures
