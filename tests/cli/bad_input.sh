#!/usr/bin/env bash
# Bad input ends pntrain under mpirun -np 2 with a non-zero exit and one message naming the
# culprit, within a timeout (no rank left hanging). Usage: bad_input.sh PNTRAIN MPIRUN...
set -u
pntrain="$1"; shift
mpirun=("$@")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/empty"; : > "$tmp/empty/train.txt"; : > "$tmp/empty/valid.txt"; : > "$tmp/empty/test.txt"
printf 'max-update = abc\n' > "$tmp/bad.ini"
failures=0
expect_error() {  # expect_error PATTERN ARGS...
  local pattern="$1"; shift
  local out rc
  out=$(timeout 120 "${mpirun[@]}" -np 2 "$pntrain" "$@" 2>&1); rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then
    echo "FAIL: pntrain $* exited with $rc (want a non-zero exit, no timeout)"; failures=$((failures+1))
  elif ! grep -q "pntrain: error: .*$pattern" <<<"$out"; then
    echo "FAIL: pntrain $*: no error message matching '$pattern'; got:"; echo "$out" | tail -5
    failures=$((failures+1))
  else
    echo "ok: pntrain $* -> $(grep -m1 'pntrain: error' <<<"$out")"
  fi
}
expect_error "data directory '/nonexistent' does not exist" --data /nonexistent
expect_error "holds no tokens" --data "$tmp/empty"
expect_error "unrecognised option '--bogus-flag'" --bogus-flag 3
expect_error "config file .*max-update" --config "$tmp/bad.ini"
expect_error "cannot read the config file" --config "$tmp/missing.ini"
expect_error "smaller than one sample" --max-tokens 10
expect_error "unknown norm 'foo'" --norm foo
expect_error "--pn-variant .fairseq. is unknown" --pn-variant fairseq
expect_error "NaN/Inf for 5 updates in a row .*lower --lr" --lr 1e12 --max-update 12 --warmup-updates 0 \
  --lr-scheduler fixed --decoder-embed-dim 32 --decoder-ffn-embed-dim 64
# fairseq data-bins: a wrong magic and a .bin shorter than its index (one 3-token sentence).
mkdir -p "$tmp/fs_magic" "$tmp/fs_short"
for d in fs_magic fs_short; do
  printf 'a 1\n' > "$tmp/$d/dict.txt"
  for s in train valid test; do
    printf 'MMIDIDX\0\0\1\0\0\0\0\0\0\0\10\1\0\0\0\0\0\0\0\2\0\0\0\0\0\0\0' > "$tmp/$d/$s.idx"
    printf '\3\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\1\0\0\0\0\0\0\0' >> "$tmp/$d/$s.idx"
    printf '\4\0\4\0\2\0' > "$tmp/$d/$s.bin"
  done
done
printf 'XX' | dd of="$tmp/fs_magic/train.idx" bs=1 seek=0 conv=notrunc 2>/dev/null
truncate -s 4 "$tmp/fs_short/train.bin"
expect_error "train.idx' is not a fairseq mmap index: expected the magic" --data "$tmp/fs_magic"
expect_error "train.bin' is truncated: its index describes 3 tokens" --data "$tmp/fs_short"
expect_error "--sample needs a language model" --arch transformer --data "$tmp" --sample 2
# A sync group size that does not divide the world is refused before any work (the data is not
# even read: its error would come next).
expect_error "--sync-group-size 3 does not divide the world size 2 (ranks): give one of 1, 2" \
  --norm sync_batch --sync-group-size 3 --data /nonexistent
exit $failures
