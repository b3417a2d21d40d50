#!/usr/bin/env bash
# Smoke test of the batch-size ablation (launcher/analysis/ablate.py): 2 norms x 2 mini-batches, a few
# updates on the builtin corpus. The CSV has one row per cell with a finite perplexity and
# update_freq = update_tokens / mini_batch; a second run skips every cell.
# Usage: ablate_smoke.sh PNTRAIN
set -u
pntrain="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ablate="$here/../../launcher/analysis/ablate.py"
py=/usr/bin/python3; [ -x "$py" ] || py=python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures+1)); }
args=(--pntrain "$pntrain" --quick --norms layer,power --mini-batches 512,1024
      --update-tokens 2048 --out "$tmp/ab" --
      --max-update 4 --validate-interval-updates 4 --decoder-layers 1 --decoder-embed-dim 32
      --decoder-ffn-embed-dim 64 --threads 1)

out=$("$py" "$ablate" "${args[@]}" 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "first run: exit $rc"
csv="$tmp/ab/ablation.csv"
if [ ! -f "$csv" ]; then fail "no $csv"; else
  cat "$csv"
  "$py" - "$csv" <<'PY' || fail "CSV check"
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1])))
ok = True
if len(rows) != 4:
    print("want 4 rows, got %d" % len(rows)); ok = False
cells = {(r["norm"], int(r["mini_batch"])) for r in rows}
if cells != {("layer", 512), ("layer", 1024), ("power", 512), ("power", 1024)}:
    print("cells", sorted(cells)); ok = False
for r in rows:
    if not math.isfinite(float(r["valid_ppl"])):
        print("ppl not finite:", r); ok = False
    if int(r["update_freq"]) != 2048 // int(r["mini_batch"]):
        print("update_freq != update_tokens/mini_batch:", r); ok = False
    if int(r["ranks"]) != 1:
        print("ranks:", r); ok = False
sys.exit(0 if ok else 1)
PY
fi
grep -q -- "--max-tokens 512 --update-freq 4" "$tmp/ab/layer_m512/cmd.txt" ||
  fail "layer_m512 command: $(cat "$tmp/ab/layer_m512/cmd.txt")"

out=$("$py" "$ablate" "${args[@]}" 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "second run: exit $rc"
skipped=$(grep -c "done before, skipped" <<<"$out")
[ "$skipped" -eq 4 ] || fail "second run skipped $skipped of 4 cells"
grep -q "running" <<<"$out" && fail "second run ran a cell again"
# Another command trains its cell afresh: the former command's metrics do not count as done.
out=$("$py" "$ablate" --pntrain "$pntrain" --quick --norms layer --mini-batches 512 \
      --update-tokens 2048 --out "$tmp/ab" -- "${args[@]:12}" --dropout 0.2 2>&1)
grep -q "model: .* dropout 0.2" "$tmp/ab/layer_m512/train.log" ||
  fail "another dropout did not train the cell afresh: $out"

# --ghost: one 2048-token micro-batch whose norms take statistics over groups of m tokens.
gargs=(--pntrain "$pntrain" --quick --norms power --mini-batches 512 --update-tokens 2048
       --ghost --out "$tmp/ab" --
       --max-update 4 --validate-interval-updates 4 --decoder-layers 1 --decoder-embed-dim 32
       --decoder-ffn-embed-dim 64 --threads 1)
out=$("$py" "$ablate" "${gargs[@]}" 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "ghost run: exit $rc"
grep -q -- "--max-tokens 2048 --update-freq 1 --stats-batch-tokens 512" \
  "$tmp/ab/power_m512_ghost/cmd.txt" 2>/dev/null ||
  fail "ghost command: $(cat "$tmp/ab/power_m512_ghost/cmd.txt" 2>&1)"
grep -q "^power,512,1,4,1," "$tmp/ab/ablation.csv" || fail "ghost CSV row: $(cat "$tmp/ab/ablation.csv")"

# --task translation: the encoder's norm varies, BLEU after training (when IWSLT is here).
iwslt="$here/../../../shared/data/iwslt14-de-en"
if [ -f "$iwslt/valid.de" ]; then
  targs=(--pntrain "$pntrain" --task translation --quick --norms power --mini-batches 1024
         --update-tokens 2048 --gen-sentences 8 --out "$tmp/mt" --
         --max-update 3 --validate-interval-updates 3 --encoder-layers 1 --decoder-layers 1
         --threads 1)
  out=$("$py" "$ablate" "${targs[@]}" 2>&1); rc=$?
  echo "$out"
  [ $rc -eq 0 ] || fail "translation run: exit $rc"
  cmd=$(cat "$tmp/mt/power_m1024/cmd.txt" 2>&1)
  grep -q -- "--encoder-norm-self power --encoder-norm-ff power --encoder-norm-final power" \
    <<<"$cmd" || fail "translation command: $cmd"
  grep -q "BLEU = " "$tmp/mt/power_m1024/eval.log" 2>/dev/null || fail "no BLEU in eval.log"
  "$py" - "$tmp/mt/ablation.csv" <<'PY' || fail "translation CSV"
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1])))
ok = len(rows) == 1 and rows[0]["update_freq"] == "2" and 0 <= float(rows[0]["bleu"]) <= 100
print(rows)
sys.exit(0 if ok else 1)
PY
  out=$("$py" "$ablate" "${targs[@]}" 2>&1)
  grep -q "done before, skipped" <<<"$out" || fail "translation rerun did not skip: $out"
  # Another command trains afresh: neither the former command's metrics nor its checkpoint count.
  out=$("$py" "$ablate" "${targs[@]}" --dropout 0.2 2>&1)
  log="$tmp/mt/power_m1024/train.log"
  grep -q "dropout 0.2" "$log" && ! grep -q "restored" "$log" ||
    fail "translation with another dropout did not train afresh: $out"
else
  echo "ablate smoke: $iwslt not found; translation part skipped"
fi

# A mini-batch that does not divide the update is refused before anything runs.
out=$("$py" "$ablate" --pntrain "$pntrain" --mini-batches 768 --out "$tmp/bad" 2>&1); rc=$?
{ [ $rc -ne 0 ] && grep -q "does not divide --update-tokens" <<<"$out"; } ||
  fail "mini-batch 768: exit $rc: $out"

[ $failures -eq 0 ] && echo "ablate smoke: all passed"
exit $((failures > 0))
