#!/usr/bin/env bash
# What a new user meets, under mpirun -np 2: an unwritable --save-dir stops before training; a
# failed save is reported once, cleaned up, and a failed final save exits non-zero; SIGTERM
# stops every rank after the update, saves, exits non-zero, and the same command resumes bit
# for bit with one clean metrics history; a checkpoint evaluates with no model flags and
# refuses a flag that disagrees with it. Usage: new_user.sh PNTRAIN MPIRUN...
set -u
pntrain="$1"; shift
mpirun=("$@")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
small=(--decoder-embed-dim 32 --decoder-ffn-embed-dim 64 --decoder-layers 1 --max-tokens 256
       --tokens-per-sample 32 --log-interval 1 --norm power --dropout 0.1)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures+1)); }
run() {  # run ARGS... ; sets out, rc
  out=$(timeout 120 "${mpirun[@]}" -np 2 "$pntrain" "$@" 2>&1); rc=$?
}
# "update loss" of every training record, and "update valid_loss" of every validation record.
records() {
  sed -n 's/.*"loss":\([^,}]*\).*"update":\([0-9]*\).*/\2 \1/p' "$1"
  sed -n 's/.*"update":\([0-9]*\).*"valid_loss":\([^,}]*\).*/\1 valid \2/p' "$1"
}

# 1. An unwritable --save-dir stops the run before training, naming the path and the reason.
: > "$tmp/not_a_dir"
run "${small[@]}" --max-update 3 --save-dir "$tmp/not_a_dir/ckpt"
if [ $rc -eq 0 ] || ! grep -q "pntrain: error: --save-dir '$tmp/not_a_dir/ckpt' cannot hold checkpoints: cannot create it" <<<"$out"; then
  fail "unwritable save dir: exit $rc"; echo "$out" | tail -5
elif grep -q "^update 1/" <<<"$out"; then fail "unwritable save dir: training started"
elif [ "$(grep -c 'pntrain: error' <<<"$out")" -ne 1 ] || grep -q "MPI_ABORT" <<<"$out"; then
  fail "unwritable save dir: not exactly one message, or an MPI_ABORT banner"; echo "$out"
else echo "ok: $(grep -m1 'pntrain: error' <<<"$out")"; fi

# 2. A failed save: one message, no half-written directory, the previous checkpoint named;
#    a failed final save exits non-zero.
run "${small[@]}" --max-update 4 --save-interval-updates 2 --validate-interval-updates 0 \
    --save-dir "$tmp/ck_fail" --debug-fault savefail@4:1
if [ $rc -ne 3 ] || [ -e "$tmp/ck_fail/checkpoint_4" ] || [ ! -e "$tmp/ck_fail/checkpoint_2/DONE" ]; then
  fail "failed final save: exit $rc (want 3), checkpoint_4 left: $([ -e "$tmp/ck_fail/checkpoint_4" ] && echo yes || echo no)"
  echo "$out" | tail -5
elif [ "$(grep -c 'not saved (rank 1)' <<<"$out")" -ne 1 ] || ! grep -q "the previous checkpoint .*checkpoint_2 is intact" <<<"$out"; then
  fail "failed final save: not one message naming checkpoint_2"; echo "$out" | grep -i "not saved"
else echo "ok: failed final save -> exit 3, $(grep -m1 'not saved' <<<"$out" | sed 's/^.*\] //')"; fi
run "${small[@]}" --max-update 2 --validate-interval-updates 0 --save-dir "$tmp/ck_none" \
    --debug-fault savefail@2:0
if [ $rc -ne 3 ] || ! grep -q "no checkpoint of this run is on disk yet" <<<"$out" || grep -q "is intact" <<<"$out"; then
  fail "failed first save: exit $rc"; echo "$out" | grep -i "not saved"
else echo "ok: failed first save says no checkpoint exists"; fi

# 3. SIGTERM on rank 1 at update 5: every rank stops after update 5, saves, exits 143; the same
#    command resumes and its losses equal an uninterrupted run's, each update recorded once.
common=("${small[@]}" --max-update 12 --validate-interval-updates 4)
run "${common[@]}" --metrics "$tmp/straight.jsonl"
[ $rc -eq 0 ] || { fail "uninterrupted run: exit $rc"; echo "$out" | tail -5; }
resume=("${common[@]}" --metrics "$tmp/resumed.jsonl" --save-dir "$tmp/ck_sig" --debug-fault sigterm@5:1)
run "${resume[@]}"
if [ $rc -ne 143 ] || ! grep -q "interrupted (SIGTERM) at update 5; the same command resumes" <<<"$out" ||
   [ ! -e "$tmp/ck_sig/checkpoint_5/DONE" ]; then
  fail "SIGTERM: exit $rc (want 143)"; echo "$out" | tail -5
else echo "ok: SIGTERM on rank 1 -> $(grep -m1 'interrupted' <<<"$out" | sed 's/^.*\] //'), exit 143"; fi
run "${resume[@]}"
if [ $rc -ne 0 ] || ! grep -q "restored .*checkpoint_5 at update 5" <<<"$out"; then
  fail "resume after SIGTERM: exit $rc"; echo "$out" | tail -5
elif ! diff <(records "$tmp/straight.jsonl") <(records "$tmp/resumed.jsonl") >/dev/null; then
  fail "resumed run differs from the uninterrupted one"
  diff <(records "$tmp/straight.jsonl") <(records "$tmp/resumed.jsonl") | head
elif [ "$(records "$tmp/resumed.jsonl" | grep -vc valid)" -ne 12 ]; then
  fail "metrics after resume do not hold 12 training records"
else echo "ok: resumed run equals the uninterrupted one bit for bit ($(records "$tmp/resumed.jsonl" | grep -c .) records)"; fi

# 3b. Resuming from an older checkpoint drops the metrics past it: one history, no line back in time.
trunc=("${small[@]}" --validate-interval-updates 4 --metrics "$tmp/trunc.jsonl"
       --save-dir "$tmp/ck_trunc" --save-interval-updates 4)
run "${trunc[@]}" --max-update 6
run "${trunc[@]}" --max-update 8 --restore-file "$tmp/ck_trunc/checkpoint_4"
if [ $rc -ne 0 ] || ! grep -q "dropped 3 records past the restored update 4" <<<"$out"; then
  fail "metrics truncation: exit $rc"; echo "$out" | grep -i metrics
elif ! diff <(records "$tmp/straight.jsonl" | awk '$1 <= 8') <(records "$tmp/trunc.jsonl") >/dev/null; then
  fail "metrics after resuming from checkpoint_4 are not one history"
  diff <(records "$tmp/straight.jsonl" | awk '$1 <= 8') <(records "$tmp/trunc.jsonl") | head
else echo "ok: resumed from checkpoint_4: metrics hold updates 1-8 once, equal to the uninterrupted run"; fi

# 4. An external SIGTERM to one rank's process (what Slurm sends): saved, exit 143, nothing left.
tag="$tmp/ck_ext"
( timeout 120 "${mpirun[@]}" -np 2 "$pntrain" "${small[@]}" --max-update 100000 \
    --validate-interval-updates 0 --metrics "$tmp/ext.jsonl" --save-dir "$tag" >"$tmp/ext.log" 2>&1
  echo $? > "$tmp/ext.rc" ) &
for _ in $(seq 600); do [ -s "$tmp/ext.jsonl" ] && [ "$(wc -l < "$tmp/ext.jsonl")" -ge 3 ] && break; sleep 0.1; done
pid=$(pgrep -f "^$pntrain .*--save-dir $tag" | head -1)  # rank 0 itself, not mpirun
[ -n "$pid" ] && kill -TERM "$pid"
wait
if [ "$(cat "$tmp/ext.rc")" != 143 ] || ! grep -q "interrupted (SIGTERM) at update" "$tmp/ext.log" ||
   ! ls "$tag"/checkpoint_*/DONE >/dev/null 2>&1; then
  fail "external SIGTERM: exit $(cat "$tmp/ext.rc")"; tail -5 "$tmp/ext.log"
else echo "ok: external SIGTERM -> $(grep -m1 'interrupted' "$tmp/ext.log" | sed 's/^.*\] //')"; fi
sleep 1
if pgrep -f "pntrain .*--save-dir $tag" >/dev/null; then fail "processes left after SIGTERM"; fi

# 5. A checkpoint evaluates with no model flag; a flag that disagrees is refused naming both.
run --restore-file "$tmp/ck_sig/checkpoint_12" --eval-only
if [ $rc -ne 0 ] || ! grep -qE "^eval \| update 12 \| valid loss" <<<"$out"; then
  fail "--eval-only with no model flags: exit $rc"; echo "$out" | tail -5
else echo "ok: $(grep -m1 '^eval' <<<"$out")"; fi
run --restore-file "$tmp/ck_sig/checkpoint_12" --eval-only --decoder-embed-dim 64
if [ $rc -eq 0 ] || ! grep -q "pntrain: error: --decoder-embed-dim 64 disagrees with checkpoint .*trained with --decoder-embed-dim 32" <<<"$out"; then
  fail "disagreeing flag: exit $rc"; echo "$out" | tail -5
else echo "ok: $(grep -m1 'pntrain: error' <<<"$out")"; fi
# 6. A corpus smaller than one update: a warning naming both sizes.
mkdir -p "$tmp/tiny"
for s in train valid test; do printf 'a b c d e f g h\ni j k l m n o p\n' > "$tmp/tiny/$s.txt"; done
run --data "$tmp/tiny" --tokens-per-sample 4 --max-tokens 64 --max-update 1 --validate-interval-updates 0
if [ $rc -ne 0 ] || ! grep -q "the training split holds 4 samples of 4 tokens (18 tokens), fewer than one update takes (32 samples" <<<"$out"; then
  fail "tiny corpus: exit $rc, no warning"; echo "$out" | tail -5
else echo "ok: $(grep -m1 'training split holds' <<<"$out" | sed 's/^.*\] //')"; fi
exit $failures
