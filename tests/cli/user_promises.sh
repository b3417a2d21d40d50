#!/usr/bin/env bash
# What pntrain and `launcher/pn run` tell a new user, held to the truth: PN's warmup named at
# startup, its validations marked (log and metrics) and a run that ends inside it saying so with
# the flag that changes it; threads from the allocation (affinity mask, OMP_NUM_THREADS,
# --threads) with their source; "the same command resumes" only where a checkpoint was written;
# configs/default.ini not added to a --restore-file; "not restarted" only under --max-restarts;
# the echoed command pasteable; a quiet build; sampling not called a resume and its prompt shown
# as the model sees it; --vocab-size / --vocab-min-count, kept by a checkpoint at another rank
# count; an INI typo's file, line and fairseq alias; one count of valid tokens; no training
# dropout at --eval-only. Usage: user_promises.sh PN_SCRIPT BUILD_DIR MPIRUN...
set -u
pn="$1" build="$2"; shift 2
mpirun=("$@")
pntrain="$build/bin/pntrain"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
unset OMP_NUM_THREADS SLURM_CPUS_PER_TASK
export PN_SKIP_SETUP=1 PN_SKIP_BUILD=1 PN_BUILD_DIR="$build" PN_NP=2 PN_STOP_GRACE=3
small=(--decoder-embed-dim 32 --decoder-ffn-embed-dim 64 --decoder-layers 1 --max-tokens 256
       --tokens-per-sample 32 --log-interval 1 --dropout 0.1)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures+1)); }
ok() { echo "ok: $*"; }

# 1. PN's warmup: 4 updates; validations at 2 and 4 inside it, 6 after it.
out=$(timeout 120 "$pntrain" "${small[@]}" --threads 1 --norm power --warmup-updates 4 \
        --max-update 6 --validate-interval-updates 2 --metrics "$tmp/pn.jsonl" 2>&1)
if ! grep -q "^PN warmup (power at self, ff, final): 4 updates .*validation.* use the running psi^2" <<<"$out"; then
  fail "no startup line naming PN's warmup"; echo "$out" | head -20
elif [ "$(grep -c '^valid | update [24] .*| PN warmup (update [24] of 4)' <<<"$out")" -ne 2 ] ||
     grep -q '^valid | update 6 .*PN warmup' <<<"$out"; then
  fail "validations inside PN's warmup not marked (or one after it marked)"; grep '^valid' <<<"$out"
elif [ "$(grep -c '"pn_warmup":true' "$tmp/pn.jsonl")" -ne 2 ] ||
     grep '"update":6' "$tmp/pn.jsonl" | grep -q pn_warmup; then
  fail "metrics: pn_warmup not on exactly the validations at 2 and 4"; cat "$tmp/pn.jsonl" | grep valid
else ok "$(grep -m1 '^valid | update 2' <<<"$out")"; fi
out=$(timeout 120 "$pntrain" "${small[@]}" --threads 1 --norm power --warmup-updates 4 \
        --max-update 4 --validate-interval-updates 0 2>&1)
if ! tail -2 <<<"$out" | grep -q "^note: the run ended inside PN's warmup (update 4 of its 4).*--pn-warmup [0-9]"; then
  fail "a run ending inside PN's warmup does not say so last"; tail -3 <<<"$out"
else ok "$(tail -1 <<<"$out" | cut -c1-120)..."; fi
out=$(timeout 120 "$pntrain" "${small[@]}" --threads 1 --max-update 2 --validate-interval-updates 2 2>&1)
if grep -q "PN warmup\|PN's warmup" <<<"$out"; then fail "an LN run speaks of PN's warmup"; fi

# 2. Threads from the allocation, with their source.
f1=("${small[@]}" --max-update 1 --validate-interval-updates 0)
out=$(taskset -c 0 "$pntrain" "${f1[@]}" 2>&1)
grep -q "^device: cpu (1 thread: 1 CPU of the affinity mask" <<<"$out" ||
  fail "taskset -c 0: $(grep '^device' <<<"$out")"
out=$(OMP_NUM_THREADS=1 "$pntrain" "${f1[@]}" 2>&1)
grep -q "^device: cpu (1 thread: OMP_NUM_THREADS=1" <<<"$out" ||
  fail "OMP_NUM_THREADS=1: $(grep '^device' <<<"$out")"
out=$(OMP_NUM_THREADS=1 "$pntrain" "${f1[@]}" --threads 3 2>&1)
grep -q "^device: cpu (3 threads: --threads 3" <<<"$out" ||
  fail "--threads 3 over OMP_NUM_THREADS=1: $(grep '^device' <<<"$out")"
if [ "$(nproc)" -lt 2 ]; then
  echo "skip: 2 ranks under taskset -c 0,1 need 2 CPUs, this machine has $(nproc)"
else
  out=$(taskset -c 0,1 timeout 120 "${mpirun[@]}" -np 2 "$pntrain" "${f1[@]}" 2>&1)
  grep -q "^device: cpu (1 thread: 2 CPUs of the affinity mask shared by 2 ranks" <<<"$out" ||
    fail "2 ranks under taskset -c 0,1: $(grep '^device' <<<"$out")"
fi
ok "threads: $(grep '^device' <<<"$out")"

# 3. pn run's promises.
run() { out=$(timeout 300 "$pn" run "$@" 2>&1); rc=$?; }
run -- "${small[@]}" --threads 1 --max-update 50 --debug-fault sigterm@3:0
if [ $rc -ne 143 ] || grep -q "interrupted; the same command resumes" <<<"$out" ||
   ! grep -q "^pn run: interrupted; nothing was saved (no --save-dir): give -- --save-dir DIR" <<<"$out"; then
  fail "interrupted without --save-dir: exit $rc"; tail -3 <<<"$out"
elif ! grep -q "checkpoint none (--save-dir DIR saves one) | metrics none (--metrics FILE" <<<"$out"; then
  fail "the closing line does not say how to get a checkpoint and metrics"; grep "^done" <<<"$out"
else ok "$(tail -1 <<<"$out")"; fi
ck="$tmp/with space"
run -- "${small[@]}" --threads 1 --max-update 50 --save-dir "$ck" --debug-fault sigterm@3:0
if [ $rc -ne 143 ] || ! grep -q "^pn run: interrupted; the same command resumes from $ck/checkpoint_3" <<<"$out"; then
  fail "interrupted with --save-dir: exit $rc"; tail -3 <<<"$out"
elif ! grep '^pn run: mpirun' <<<"$out" | grep -qF -- "--save-dir $(printf %q "$ck")"; then
  fail "the echoed command is not quoted: $(grep '^pn run: mpirun' <<<"$out")"
else ok "$(tail -1 <<<"$out")"; fi
run -- "${small[@]}" --threads 1 --max-update -1
if [ $rc -ne 2 ] || grep -q "not restarted" <<<"$out"; then
  fail "bad input without --max-restarts: exit $rc, $(grep 'not restarted' <<<"$out")"
fi
run -- --restore-file "$ck/checkpoint_3" --sample 2 --prompt "w3 zebra" --max-len 4 --seed 9
if [ $rc -ne 0 ] || ! grep -q "^sample 2 | w3 <unk>" <<<"$out"; then
  fail "pn run -- --restore-file CK --sample 2: exit $rc"; tail -4 <<<"$out"
elif grep -q "default.ini" <<<"$out" || grep -q "resuming from" <<<"$out"; then
  fail "sampling got configs/default.ini or a resume's warning"; grep "default.ini\|resuming" <<<"$out"
else ok "$(grep -m1 '^sample 1' <<<"$out")"; fi
out=$(PN_SKIP_BUILD=0 timeout 300 "$pn" run -- "${small[@]}" --threads 1 --max-update 1 2>&1)
# "built" where a commit since the last build refreshed the build's provenance, else "up to date".
if grep -q "Built target" <<<"$out" || ! grep -Eq "^pn run: build: pntrain (up to date|built) in" <<<"$out"; then
  fail "pn run's build is not one line"; grep -m3 "build\|Built" <<<"$out"
fi

# pn run's setup (every package missing, apt-get and sudo stand-ins): it names what it
# installs and how, and leaves the tests' optional packages to pn test.
mkdir -p "$tmp/fake"
printf '#!/bin/sh\nexit 1\n' >"$tmp/fake/dpkg-query"
printf '#!/bin/sh\necho "apt-get $*" >>"%s"\n' "$tmp/apt.log" >"$tmp/fake/apt-get"
printf '#!/bin/sh\nexec "$@"\n' >"$tmp/fake/sudo"
chmod +x "$tmp/fake/"*
out=$(PATH="$tmp/fake:$PATH" PN_SKIP_SETUP=0 timeout 300 "$pn" run -- "${small[@]}" --threads 1 --max-update 1 2>&1)
if ! grep -q "^pn setup: installing cmake .* with \(sudo \)\?apt-get" <<<"$out" ||
   grep -q "python3-torch\|slurm-wlm" "$tmp/apt.log" || ! grep -q "install .*libopenmpi-dev" "$tmp/apt.log"; then
  fail "pn run's setup: $(grep 'pn setup' <<<"$out"); apt-get: $(tr '\n' ';' <"$tmp/apt.log")"
else ok "$(grep '^pn setup' <<<"$out" | cut -c1-100)..."; fi

# 5. --vocab-size and --vocab-min-count on a corpus of known counts (a 9, b 7, c 5, d 3, e 1),
#    kept by a checkpoint saved by 2 ranks and evaluated at 1.
mkdir -p "$tmp/corpus"
line=$(printf 'a %.0s' $(seq 9); printf 'b %.0s' $(seq 7); printf 'c %.0s' $(seq 5); printf 'd d d e')
for i in $(seq 60); do echo "$line"; done >"$tmp/corpus/train.txt"
echo "a b c d e f" >"$tmp/corpus/valid.txt"; cp "$tmp/corpus/valid.txt" "$tmp/corpus/test.txt"
v() { grep -o '^corpus [^:]*: vocabulary [0-9]*' <<<"$1" | awk '{print $NF}'; }
out=$("$pntrain" "${f1[@]}" --threads 1 --data "$tmp/corpus" 2>&1)
[ "$(v "$out")" = 8 ] || fail "the whole vocabulary: $(v "$out"), want 8"
out=$("$pntrain" "${f1[@]}" --threads 1 --data "$tmp/corpus" --vocab-min-count 300 2>&1)
[ "$(v "$out")" = 6 ] || fail "--vocab-min-count 300: vocabulary $(v "$out"), want 6 (a b c)"
out=$(timeout 120 "${mpirun[@]}" -np 2 "$pntrain" "${f1[@]}" --threads 1 --data "$tmp/corpus" \
        --vocab-size 5 --save-dir "$tmp/vck" 2>&1)
if [ "$(v "$out")" != 5 ] || ! grep -q "<unk> [1-9][0-9.]*% of train" <<<"$out"; then
  fail "--vocab-size 5 at 2 ranks: vocabulary $(v "$out"), want 5, and its <unk> share"; grep "^corpus" <<<"$out"
fi
out=$("$pntrain" --restore-file "$tmp/vck/checkpoint_1" --eval-only --threads 1 2>&1); rc=$?
if [ $rc -ne 0 ] || [ "$(v "$out")" != 5 ]; then
  fail "the checkpoint of --vocab-size 5 at 1 rank: exit $rc, vocabulary $(v "$out")"; tail -3 <<<"$out"
elif grep -q "^model: .*dropout" <<<"$out"; then fail "--eval-only prints the training dropout"
else ok "--vocab-size 5 saved by 2 ranks, evaluated at 1: $(grep '^corpus' <<<"$out")"; fi

# 6. An INI typo: its file, line and the fairseq name; the valid tokens counted once.
printf 'max-update = 5\nlearning-rate = 0.01\n' >"$tmp/typo.ini"
out=$("$pntrain" --config "$tmp/typo.ini" 2>&1); rc=$?
grep -q "in config file '$tmp/typo.ini', line 2: unrecognised option '--learning-rate': did you mean --lr?" <<<"$out" &&
  [ $rc -eq 2 ] || fail "INI typo: exit $rc: $out"
out=$("$pntrain" "${small[@]}" --threads 1 --max-update 1 --validate-interval-updates 1 2>&1)
said=$(grep -o '^corpus .*, valid [0-9]*' <<<"$out" | awk '{print $NF}')
counted=$(grep -o '^valid | .*| tokens [0-9]*' <<<"$out" | awk '{print $NF}')
[ -n "$said" ] && [ "$said" = "$counted" ] || fail "valid tokens: $said at startup, $counted in validation"

[ $failures -eq 0 ] && echo "all user promises hold"
exit $failures
