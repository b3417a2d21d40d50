#!/usr/bin/env bash
# Smoke test of `pn reproduce` (launcher/reproduce.py) on a tiny budget: 5 norms x 2 seeds on the
# builtin corpus, a 2-cell ghost ablation. REPORT.md must hold every Table 2 row with a mean
# over 2 seeds, the Figure 5 table, and (with numpy) the embedding spectra and the PN warmup
# table; a second run skips every cell. Usage: reproduce_smoke.sh PNTRAIN
set -u
pntrain="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py=/usr/bin/python3; [ -x "$py" ] || py=python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures+1)); }
args=(--pntrain "$pntrain" --config "$here/../../configs/ablate_quick.ini" --data builtin
      --seeds 1,2 --mini-batches 512,1024 --ablation-norms power --update-tokens 1024
      --out "$tmp/rp" --
      --max-update 6 --validate-interval-updates 3 --warmup-updates 2 --decoder-layers 1
      --decoder-embed-dim 32 --decoder-ffn-embed-dim 64 --threads 1)
out=$("$py" "$here/../../launcher/reproduce.py" "${args[@]}" 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "first run: exit $rc"
report="$tmp/rp/REPORT.md"
if [ ! -f "$report" ]; then fail "no REPORT.md"; else
  for row in "| LN |" "| BN |" "| PN-V |" "| PN (paper) |" "| PN (authors, pre-scaling G=4) |"; do
    grep -F "$row" "$report" | grep -q "(2) |" || fail "no 2-seed row '$row' in REPORT.md"
  done
  grep -q "^| power | [0-9.]* | [0-9.]* |" "$report" || fail "no Figure 5 row"
  grep -q -- "--pn-variant authors --norm-prescale-groups 4" "$tmp/rp/table/power_authors_s1/cmd.txt" ||
    fail "authors cell command: $(cat "$tmp/rp/table/power_authors_s1/cmd.txt")"
  if "$py" -c "import numpy" 2>/dev/null; then
    grep -q "^| LN | [0-9.]* | [0-9.]* |" "$report" || fail "no embedding spectrum row for LN"
    grep -q "^| 1 | [0-9.e+-]* |" "$report" || fail "no PN warmup row for update 1"
  fi
fi
out=$("$py" "$here/../../launcher/reproduce.py" "${args[@]}" 2>&1); rc=$?
[ $rc -eq 0 ] || fail "second run: exit $rc"
skipped=$(grep -c "done before, skipped" <<<"$out")
[ "$skipped" -eq 12 ] || fail "second run skipped $skipped of 12 cells (10 table, 2 ablation): $out"
out=$("$py" "$here/../../launcher/reproduce.py" --pntrain "$pntrain" --data builtin --norms layer,foo \
  --out "$tmp/bad" 2>&1); rc=$?
{ [ $rc -ne 0 ] && grep -q "unknown foo" <<<"$out"; } || fail "--norms foo: exit $rc: $out"
[ $failures -eq 0 ] && echo "reproduce smoke: all passed"
exit $((failures > 0))
