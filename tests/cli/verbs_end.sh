#!/usr/bin/env bash
# No process that a verb of launcher/pn started outlives it: `pn test`, `pn run`, `pn reproduce`,
# `pn ablate` and `pn bench` each get SIGTERM (and `pn reproduce`, `pn bench` SIGINT) once their
# work is running; the verb must end within 20 s and leave no process behind (found by a marker
# in the environment, which every descendant inherits). Long verbs show their progress: a
# running reproduction cell prints its update of its total.
# Usage: verbs_end.sh PN_SCRIPT BUILD_DIR
set -u
pn="$1" build="$2"
tmp=$(mktemp -d)
export PN_SKIP_SETUP=1 PN_SKIP_BUILD=1 PN_BUILD_DIR="$build" PN_NP=2 PN_STOP_GRACE=3 PN_PROGRESS_S=2
export OMP_NUM_THREADS=1 TMPDIR="$tmp"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures+1)); }
# The processes whose environment holds PN_VERB_MARK=$1.
marked() {
  grep -s -l -z -x -- "PN_VERB_MARK=$1" /proc/[0-9]*/environ | sed 's|^/proc/\([0-9]*\)/environ$|\1|'
  return 0
}
cleanup() {
  local p
  for p in $(marked "$$-"'[a-z_]*') $(jobs -p); do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
tiny=(--decoder-layers 1 --decoder-embed-dim 32 --decoder-attention-heads 2
      --decoder-ffn-embed-dim 64 --max-tokens 256 --tokens-per-sample 32 --threads 1)
# check NAME SIGNAL WAIT_FOR VERB ARGS...: starts the verb, waits until a process named WAIT_FOR
# runs under it, signals the verb, and checks that everything ended.
check() {
  local name="$1" sig="$2" want="$3" mark="$$-$1" pid p found="" i rc
  shift 3
  ( PN_VERB_MARK="$mark" exec "$pn" "$@" >"$tmp/$name.log" 2>&1 ) &
  pid=$!
  for i in $(seq 600); do
    for p in $(marked "$mark"); do
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$want" ] && found=1
    done
    [ -n "$found" ] && break
    sleep 0.1
  done
  [ -n "$found" ] || { fail "$name: no '$want' started: $(tail -3 "$tmp/$name.log")"; return; }
  sleep 2
  # UNTIL_LINE: a line the verb must have printed before the signal (up to 30 s more), so that a
  # slow start on a loaded machine does not decide what the log holds.
  if [ -n "${UNTIL_LINE:-}" ]; then
    for i in $(seq 300); do grep -q "$UNTIL_LINE" "$tmp/$name.log" && break; sleep 0.1; done
  fi
  kill -"$sig" "$pid"
  for i in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then fail "$name: the verb still runs 20 s after SIG$sig"; fi
  wait "$pid"; rc=$?
  sleep 1
  local left
  left=$(marked "$mark")
  local want_rc=143; [ "$sig" = INT ] && want_rc=130
  if [ "$rc" -ne "$want_rc" ]; then
    fail "$name: exit $rc after SIG$sig (want $want_rc): $(tail -3 "$tmp/$name.log")"
  elif [ -n "$left" ]; then
    fail "$name: SIG$sig left $(for p in $left; do tr '\0' ' ' </proc/$p/cmdline | cut -c1-80; echo; done)"
  else
    echo "ok: pn $1 ended by SIG$sig (exit $rc), nothing left: $(grep -m1 '^pn' "$tmp/$name.log")"
  fi
}
check test TERM "pntrain" test -R cli_new_user  # about 20 s: still running when the signal comes
check run TERM "pntrain" run -- "${tiny[@]}" --max-update 100000 --save-dir "$tmp/ck"
UNTIL_LINE="seed 1: update [0-9]*/100000" \
  check reproduce TERM "pntrain" reproduce --data builtin --norms layer --no-ablation \
  --out "$tmp/rp" -- "${tiny[@]}" --max-update 100000 --validate-interval-updates 0
grep -q "\[1/[0-9]\] layer *seed 1: update [0-9]*/100000 ([0-9]*%), epoch .*, eta" "$tmp/reproduce.log" ||
  fail "reproduce: no progress line of the running cell: $(cat "$tmp/reproduce.log")"
check reproduce_int INT "pntrain" reproduce --data builtin --norms layer --no-ablation \
  --out "$tmp/rp2" -- "${tiny[@]}" --max-update 100000 --validate-interval-updates 0
check ablate TERM "pntrain" ablate --data builtin --norms layer --mini-batches 256 \
  --update-tokens 512 --out "$tmp/ab" -- "${tiny[@]:0:8}" --tokens-per-sample 32 --threads 1 \
  --max-update 100000 --validate-interval-updates 50000
check bench INT "pnbench" bench --ranks 2 --norms layer --group-sizes world --modes weak \
  --tokens 256 --warmup 1 --measure 100000 --out "$tmp/bench" -- "${tiny[@]:0:8}" --threads 1
[ $failures -eq 0 ] && echo "verbs end: all passed"
exit $((failures > 0))
