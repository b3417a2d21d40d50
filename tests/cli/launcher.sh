#!/usr/bin/env bash
# `launcher/pn run` as a cluster uses it, 2 ranks: SIGTERM to mpirun (what kill and scancel
# deliver) at update 5 saves checkpoint_5, exits 143 and leaves no process, and the same command
# resumes bit for bit; a SIGTERM to mpirun or to `pn run` in the middle of a run saves; under a
# bare mpirun the ranks save too; --max-restarts 2 survives a rank killed by SIGKILL and ends
# with the uninterrupted run's checkpoint, bit for bit; bad input is not retried.
# Usage: launcher.sh PN_SCRIPT BUILD_DIR
set -u
pn="$1" build="$2"
tmp=$(mktemp -d)
cleanup() {  # the jobs this test started, by their process ids
  local p
  for p in $(jobs -p); do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
export PN_SKIP_SETUP=1 PN_SKIP_BUILD=1 PN_BUILD_DIR="$build" PN_NP=2 PN_STOP_GRACE=3
small=(--decoder-embed-dim 32 --decoder-ffn-embed-dim 64 --decoder-layers 1 --max-tokens 256
       --tokens-per-sample 32 --log-interval 1 --norm power --dropout 0.1 --threads 1)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures+1)); }
run() {  # run ARGS... : pn run with a time limit; sets out, rc
  out=$(timeout 300 "$pn" run "$@" 2>&1); rc=$?
}
# "update loss" of every training record, and "update valid_loss" of every validation record.
records() {
  sed -n 's/.*"loss":\([^,}]*\).*"update":\([0-9]*\).*/\2 \1/p' "$1"
  sed -n 's/.*"update":\([0-9]*\).*"valid_loss":\([^,}]*\).*/\1 valid \2/p' "$1"
}
left() {  # processes of the run whose --save-dir is $1
  pgrep -f -- "--save-dir $1( |\$)"
}
# start TAG ARGS...: pn run in the background, output in $tmp/TAG.log, exit status in TAG.rc
start() {
  local tag="$1"; shift
  ( timeout 300 "$pn" run "$@" >"$tmp/$tag.log" 2>&1; echo $? >"$tmp/$tag.rc" ) &
}
# wait_records FILE N: until the metrics file holds N records
wait_records() {
  for _ in $(seq 1200); do
    [ -s "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
finished() { for _ in $(seq 1200); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; }

# 1. SIGTERM to mpirun at update 5 (rank 1 signals its parent, mpirun, and runs on): every rank
#    stops after update 5 on mpirun's first message, saves, `pn run` exits 143, no process is
#    left; the same command resumes, and its losses equal an uninterrupted run's bit for bit.
common=(-- "${small[@]}" --max-update 12 --validate-interval-updates 4)
run "${common[@]}" --metrics "$tmp/straight.jsonl" --save-dir "$tmp/ck_straight"
[ $rc -eq 0 ] || { fail "uninterrupted run: exit $rc"; echo "$out" | tail -5; }
resume=("${common[@]}" --metrics "$tmp/resumed.jsonl" --save-dir "$tmp/ck_sig"
        --debug-fault sigterm-mpirun@5:1)
# mpirun's grace of 2 x 30 s would end it a minute after its ranks: `pn run` ends it after 2 s.
t0=$SECONDS
PN_STOP_GRACE=30 run "${resume[@]}"
if [ $((SECONDS - t0)) -ge 30 ]; then
  fail "SIGTERM to mpirun: pn run took $((SECONDS - t0)) s, mpirun's grace and more"
fi
if [ $rc -ne 143 ] || [ ! -e "$tmp/ck_sig/checkpoint_5/DONE" ] ||
   ls -d "$tmp"/ck_sig/checkpoint_{6..12} >/dev/null 2>&1 ||
   ! grep -q "^pn run: rank 0 .*: interrupted (SIGCONT: mpirun is ending the job) at update 5 | done" <<<"$out"; then
  fail "SIGTERM to mpirun: exit $rc (want 143)"; echo "$out" | tail -5; ls "$tmp/ck_sig"
else echo "ok: SIGTERM to mpirun at update 5 -> checkpoint_5, exit 143: $(grep -m1 '^pn run: interrupted' <<<"$out")"; fi
[ -z "$(left "$tmp/ck_sig")" ] || fail "processes left after SIGTERM to mpirun"
run "${resume[@]}"
if [ $rc -ne 0 ] || ! grep -q "restored .*checkpoint_5 at update 5" <<<"$out"; then
  fail "resume after SIGTERM to mpirun: exit $rc"; echo "$out" | tail -5
elif ! diff <(records "$tmp/straight.jsonl") <(records "$tmp/resumed.jsonl") >/dev/null; then
  fail "resumed run differs from the uninterrupted one"
  diff <(records "$tmp/straight.jsonl") <(records "$tmp/resumed.jsonl") | head
else echo "ok: resumed run equals the uninterrupted one bit for bit ($(records "$tmp/resumed.jsonl" | grep -c .) records)"; fi

# 2. The same under a bare mpirun (no `pn run`): the ranks save on mpirun's SIGCONT; mpirun
#    itself exits 1, as Open MPI does when it is terminated.
out=$(timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to none \
      --mca odls_base_sigkill_timeout 3 "$build/bin/pntrain" "${small[@]}" --max-update 12 \
      --validate-interval-updates 0 --save-dir "$tmp/ck_bare" --debug-fault sigterm-mpirun@5:1 2>&1)
rc=$?
if [ $rc -ne 1 ] || [ ! -e "$tmp/ck_bare/checkpoint_5/DONE" ] || [ -n "$(left "$tmp/ck_bare")" ]; then
  fail "SIGTERM to a bare mpirun: exit $rc (want mpirun's 1), checkpoint_5: $(ls "$tmp/ck_bare" 2>&1 | tr '\n' ' ')"
  echo "$out" | tail -5
else echo "ok: SIGTERM to a bare mpirun -> checkpoint_5 saved, mpirun exits 1"; fi

# 3. kill -TERM of mpirun, then of `pn run`, from outside in the middle of a long run: a
#    checkpoint, exit 143, nothing left.
for target in mpirun pn; do
  dir="$tmp/ck_ext_$target"
  start "ext_$target" -- "${small[@]}" --max-update 100000 --validate-interval-updates 0 \
    --metrics "$tmp/ext_$target.jsonl" --save-dir "$dir"
  wait_records "$tmp/ext_$target.jsonl" 5
  # -o, the oldest: the launcher's command substitutions fork copies of it with its command
  # line, and after PIDs wrap (pid_max 32768, a long test run) one may have the lowest PID.
  if [ $target = mpirun ]; then pid=$(pgrep -o -f -- "^mpirun .*--save-dir $dir( |\$)")
  else pid=$(pgrep -o -f -- "pn run .*--save-dir $dir( |\$)"); fi
  t0=$(date +%s.%N)
  [ -n "$pid" ] && kill -TERM "$pid"
  finished "$tmp/ext_$target.rc"
  ck=$(ls -d "$dir"/checkpoint_* 2>/dev/null | head -1)
  if [ "$(cat "$tmp/ext_$target.rc")" != 143 ] || [ ! -e "$ck/DONE" ] || [ -n "$(left "$dir")" ]; then
    fail "kill -TERM $target: exit $(cat "$tmp/ext_$target.rc")"; tail -5 "$tmp/ext_$target.log"
  else
    echo "ok: kill -TERM $target at update $(grep -c '"loss"' "$tmp/ext_$target.jsonl") or later ->" \
         "${ck##*/} saved $(awk -v a="$(stat -c %.9Y "$ck/DONE")" -v b="$t0" 'BEGIN { printf "%.2f", a - b }') s" \
         "after the signal, exit 143"
  fi
done

# 4. --max-restarts 2 and rank 1 killed by SIGKILL: the job relaunches from its newest
#    checkpoint by itself and ends with the uninterrupted run's checkpoint, bit for bit.
long=(-- "${small[@]}" --max-update 200 --validate-interval-updates 0 --save-interval-updates 20
      --keep-last 2)
run "${long[@]}" --save-dir "$tmp/ck_whole"
[ $rc -eq 0 ] || { fail "uninterrupted long run: exit $rc"; echo "$out" | tail -5; }
# mpirun's own grace (30 s, twice) would hold the surviving rank a minute: pn run ends the job
# within seconds of the death instead.
PN_STOP_GRACE=30 start restart --max-restarts 2 "${long[@]}" --metrics "$tmp/restart.jsonl" \
  --save-dir "$tmp/ck_restart"
wait_records "$tmp/restart.jsonl" 50
rank1=$(pgrep -f -- "^$build/bin/pntrain .*--save-dir $tmp/ck_restart( |\$)" | tail -1)
killed_at=$(wc -l <"$tmp/restart.jsonl" | tr -d ' ')
[ -n "$rank1" ] && kill -KILL "$rank1"
t_kill=$SECONDS
for _ in $(seq 600); do grep -q "restart 1 of 2" "$tmp/restart.log" && break; sleep 0.1; done
noticed=$((SECONDS - t_kill))
[ "$noticed" -le 15 ] && grep -q "^pn run: 1 of 2 ranks ended without the job's end" "$tmp/restart.log" ||
  fail "a dead rank under pn run was noticed after $noticed s: $(grep '^pn run' "$tmp/restart.log")"
finished "$tmp/restart.rc"
same=1
for f in model.bin rank0.bin rank1.bin; do
  cmp -s "$tmp/ck_whole/checkpoint_200/$f" "$tmp/ck_restart/checkpoint_200/$f" || same=0
done
if [ "$(cat "$tmp/restart.rc")" != 0 ] || ! grep -q "^pn run: the job failed (exit .*); restart 1 of 2 from .*checkpoint_" "$tmp/restart.log"; then
  fail "--max-restarts 2 after a SIGKILL: exit $(cat "$tmp/restart.rc")"; grep "^pn run" "$tmp/restart.log"; tail -5 "$tmp/restart.log"
elif [ $same -ne 1 ]; then fail "the restarted run's checkpoint_200 differs from the uninterrupted run's"
else echo "ok: rank 1 killed at update ~$killed_at, the job restarted $noticed s later; $(grep -m1 '^pn run: the job failed' "$tmp/restart.log" | sed 's/^pn run: //'); checkpoint_200 equals the uninterrupted run's bit for bit"; fi
[ -z "$(left "$tmp/ck_restart")" ] || fail "processes left after the restarted run"

# 5. Bad input is not retried: one launch, exit 2.
run --max-restarts 2 -- "${small[@]}" --max-update 3 --decoder-attention-heads 3
if [ $rc -ne 2 ] || [ "$(grep -c '^pn run: mpirun' <<<"$out")" -ne 1 ] ||
   ! grep -q "pn run: not restarted: pntrain refused its input (exit 2)" <<<"$out"; then
  fail "bad input with --max-restarts 2: exit $rc, $(grep -c '^pn run: mpirun' <<<"$out") launches"; echo "$out" | tail -5
else echo "ok: bad input with --max-restarts 2 -> one launch, exit 2: $(grep -m1 'pntrain: error' <<<"$out")"; fi
exit $failures
