#!/usr/bin/env bash
# Smoke test of `pn reproduce` (launcher/analysis/reproduce.py) on a tiny budget: 5 norms x 2 seeds on the
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
cp "$here/../../configs/ablate_quick.ini" "$tmp/quick.ini"
args=(--pntrain "$pntrain" --config "$tmp/quick.ini" --data builtin
      --seeds 1,2 --mini-batches 512,1024 --ablation-norms power --update-tokens 1024
      --out "$tmp/rp")
extra=(-- --max-update 6 --validate-interval-updates 3 --warmup-updates 2 --decoder-layers 1
       --decoder-embed-dim 32 --decoder-ffn-embed-dim 64 --threads 1)
out=$("$py" "$here/../../launcher/analysis/reproduce.py" "${args[@]}" "${extra[@]}" 2>&1); rc=$?
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
out=$("$py" "$here/../../launcher/analysis/reproduce.py" "${args[@]}" "${extra[@]}" 2>&1); rc=$?
[ $rc -eq 0 ] || fail "second run: exit $rc"
skipped=$(grep -c "done before, skipped" <<<"$out")
[ "$skipped" -eq 12 ] || fail "second run skipped $skipped of 12 cells (10 table, 2 ablation): $out"
# The config's settings name its cells, not its bytes: comments and spacing change nothing, a
# changed value runs the cell afresh.
one_cell() { "$py" "$here/../../launcher/analysis/reproduce.py" "${args[@]}" --norms layer \
  --seeds 1 --no-ablation "${extra[@]}" 2>&1; }
sed -i 's/^lr = /lr   =    /; s/^dropout = 0.0/dropout = 0.0  # none/' "$tmp/quick.ini"
printf '# a comment\n\n' >>"$tmp/quick.ini"
out=$(one_cell)
grep -q "layer .*seed 1: done before, skipped" <<<"$out" || fail "a comment reran LN: $out"
sed -i 's/^dropout = 0.0 /dropout = 0.1 /' "$tmp/quick.ini"
out=$(one_cell)
grep -q "layer .*seed 1: running" <<<"$out" &&
  grep -q "model: .* dropout 0.1" "$tmp/rp/table/layer_s1/train.log" ||
  fail "a changed dropout did not train LN afresh: $out"
out=$("$py" "$here/../../launcher/analysis/reproduce.py" --pntrain "$pntrain" --data builtin --norms layer,foo \
  --out "$tmp/bad" 2>&1); rc=$?
{ [ $rc -ne 0 ] && grep -q "unknown foo" <<<"$out"; } || fail "--norms foo: exit $rc: $out"
# A norm of pntrain's registry (pntrain --list-norms) beyond the paper's rows is a cell too.
out=$("$py" "$here/../../launcher/analysis/reproduce.py" "${args[@]}" --norms dyt --seeds 1 \
  --no-ablation --out "$tmp/dyt" "${extra[@]}" 2>&1) &&
  grep -q "dyt .*seed 1: .*valid ppl" <<<"$out" || fail "--norms dyt trained no DyT cell: $out"
# The medium preset: PN's alpha grid on short runs, cells to early stopping or their last update,
# checkpoint_best evaluated; a rerun skips every cell and tuning run; a cell that did not record
# its end resumes from its checkpoint and reports the same figures.
mflags=(--max-update 6 --validate-interval-updates 3 --save-interval-updates 3 --warmup-updates 2
        --decoder-layers 1 --decoder-embed-dim 32 --decoder-ffn-embed-dim 64 --max-tokens 512)
margs=(--pntrain "$pntrain" --medium --data builtin --norms layer,power --out "$tmp/md" -- "${mflags[@]}")
out=$("$py" "$here/../../launcher/analysis/reproduce.py" "${margs[@]}" 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "medium: exit $rc"
report="$tmp/md/REPORT.md"
grep -q "^| LN | 1 | [0-9.]* | [0-9.]* |" "$report" || fail "medium: no LN row: $(cat "$report")"
grep -q "^| PN (paper) | 1 | [0-9.]* | [0-9.]* |" "$report" || fail "medium: no PN row"
grep -q "^| PN (paper) | 6 | [0-9.]* | [0-9.]* | [0-9.]* | 0.9[59]* |" "$report" ||
  fail "medium: no alpha grid row: $(grep -A4 momenta "$report")"
grep -q -- "--pn-alpha-fwd 0.9" "$tmp/md/table/power_s1/cmd.txt" ||
  fail "medium: the PN cell does not use a tuned alpha: $(cat "$tmp/md/table/power_s1/cmd.txt")"
[ -f "$tmp/md/figs/curves_medium.png" ] || ! "$py" -c "import matplotlib" 2>/dev/null ||
  fail "medium: no curves_medium.png"
ln_row=$(grep "^| LN | 1 |" "$report")
rm "$tmp/md/table/layer_s1/trained.json" "$tmp/md/table/layer_s1/eval.json"
out=$("$py" "$here/../../launcher/analysis/reproduce.py" "${margs[@]}" 2>&1); rc=$?
[ $rc -eq 0 ] || fail "medium rerun: exit $rc"
skipped=$(grep -c "done before, skipped" <<<"$out")
[ "$skipped" -eq 4 ] || fail "medium rerun skipped $skipped of 4 (3 tuning runs, 1 cell): $out"
grep -q "layer .*seed 1: resuming" <<<"$out" || fail "medium rerun did not resume LN: $out"
[ "$(grep "^| LN | 1 |" "$report" | cut -d'|' -f1-6)" = "$(cut -d'|' -f1-6 <<<"$ln_row")" ] ||
  fail "medium: resumed LN row differs: $ln_row vs $(grep "^| LN | 1 |" "$report")"
# A cell recorded under the former digest, of the config's bytes, is the same cell.
bytes=$(sha256sum "$here/../../configs/reproduce_medium_ptb.ini" | cut -c1-16)
sed -i "s/<config settings sha256 [0-9a-f]*>/<config sha256 $bytes>/" \
  "$tmp/md/table/layer_s1/cmd.txt"
out=$("$py" "$here/../../launcher/analysis/reproduce.py" "${margs[@]}" 2>&1)
grep -q "layer .*seed 1: done before, skipped" <<<"$out" ||
  fail "medium: the bytes' digest reran LN: $out"
# A second seed reuses PN's alpha chosen with seed 1: its tuning runs are not run again.
out=$("$py" "$here/../../launcher/analysis/reproduce.py" --pntrain "$pntrain" --medium --data builtin \
      --norms power --seeds 2 --out "$tmp/md" -- "${mflags[@]}" 2>&1)
grep -q "power .*seed 2: running" <<<"$out" || fail "medium --seeds 2 did not train PN: $out"
[ "$(grep -c "tune power alpha .*done before, skipped" <<<"$out")" -eq 3 ] ||
  fail "medium --seeds 2 tuned again: $out"
# The statistics over seeds: LN and PN with 2 seeds each now, so the report gives PN's
# difference to LN with its interval; Welch's t against values by hand.
"$py" "$here/../../launcher/analysis/reproduce.py" --pntrain "$pntrain" --medium --data builtin \
  --norms layer,power --seeds 1,2 --out "$tmp/md" -- "${mflags[@]}" >/dev/null 2>&1
grep -q "^| PN (paper) | 2 | [0-9.]* ± [0-9.]* | [-+][0-9.]* ([-+][0-9.]*%) | \[[-+][0-9.]*, [-+][0-9.]*\] | [0-9.]* |" \
  "$tmp/md/REPORT.md" || fail "medium: no PN row with a 95% interval: $(grep -A8 'Over seeds' "$tmp/md/REPORT.md")"
grep -q "^| LN s1 | [0-9]* | [0-9.]* |" "$tmp/md/REPORT.md" || fail "medium: no matched-loss row for LN"
PYTHONPATH="$here/../../launcher/analysis" "$py" -c '
from seed_stats import welch
w = welch([1.0, 2.0, 3.0], [2.0, 4.0, 6.0])   # diff -2, se sqrt(5/3), df 2.94, t 1.55: p 0.22, t_0.975 3.22
assert abs(w["diff"] + 2) < 1e-12 and abs(w["df"] - 2.9412) < 1e-3 and 0.21 < w["p"] < 0.23, w
assert abs(w["lo"] + 6.155) < 0.01 and abs(w["hi"] - 2.155) < 0.01, w
assert welch([1.0], [2.0, 3.0]) is None' || fail "seed_stats: Welch against values by hand"
# seed_stats as a command: two groups of cells (globs) compared as the report compares norms; a
# group without a finished cell is refused by name.
out=$("$py" "$here/../../launcher/analysis/seed_stats.py" PN "$tmp/md/table/power_s*" \
      LN "$tmp/md/table/layer_s1,$tmp/md/table/layer_s2" 2>&1) || fail "seed_stats command: $out"
grep -q "^PN − LN: [-+][0-9.]* test ppl, 95% CI \[[-+][0-9.]*, [-+][0-9.]*\] (Welch, .* 2 vs 2 seeds)" \
  <<<"$out" || fail "seed_stats command: no interval: $out"
out=$("$py" "$here/../../launcher/analysis/seed_stats.py" PN "$tmp/md/nothing*" LN \
      "$tmp/md/table/layer_s*" 2>&1) && fail "seed_stats command: a group without cells passed"
grep -q "no finished cell .* matches '$tmp/md/nothing\*'" <<<"$out" ||
  fail "seed_stats command: the empty group not named: $out"
# The dropout control: every norm at each dropout, the config's 0.3 being the table's cell.
out=$("$py" "$here/../../launcher/analysis/reproduce.py" --pntrain "$pntrain" --medium --data builtin \
      --norms layer,power --dropouts 0.1,0.3 --out "$tmp/md" -- "${mflags[@]}" 2>&1); rc=$?
[ $rc -eq 0 ] || fail "dropouts: exit $rc: $out"
grep -q "layer .*dropout 0.3 seed 1: done before, skipped" <<<"$out" || fail "dropouts: LN at 0.3 is not the table's cell: $out"
grep -q "layer .*dropout 0.1 seed 1: running" <<<"$out" || fail "dropouts: LN at 0.1 did not run: $out"
grep -q -- "--dropout 0.1" "$tmp/md/dropout/layer_d0.1_s1/cmd.txt" || fail "dropouts: no --dropout 0.1 in the cell's command"
grep -q "^| LN | 1 | [0-9.]* ([0-9.]*) | [0-9.]* ([0-9.]*) |" "$tmp/md/DROPOUT.md" &&
  grep -q "^| PN (paper) | 0\.[13] | 1 |" "$tmp/md/DROPOUT.md" ||
  fail "dropouts: DROPOUT.md lacks the cells or the best-dropout row: $(cat "$tmp/md/DROPOUT.md")"
out=$("$py" "$here/../../launcher/analysis/reproduce.py" --pntrain "$pntrain" --medium --data builtin \
      --dropouts 0.1,1.5 --out "$tmp/md" 2>&1)
grep -q "must be comma-separated values in \[0, 1)" <<<"$out" || fail "dropouts 1.5: $out"
# The long preset: the medium cells with the config's 30 epochs, patience 10 and PN's alphas
# from the config (no tuning runs).
out=$("$py" "$here/../../launcher/analysis/reproduce.py" --pntrain "$pntrain" --long --data builtin \
      --norms layer,power --seeds 1 --out "$tmp/lg" -- "${mflags[@]}" 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "long: exit $rc"
report="$tmp/lg/REPORT.md"
grep -q "^# PowerNorm reproduction: language model, --long" "$report" || fail "long: title"
grep -q "until --max-epoch 30 or 10 validations" "$report" || fail "long: not 30 epochs, patience 10"
grep -q "^| PN (paper) | 1 | [0-9.]* | [0-9.]* |" "$report" || fail "long: no PN row: $(cat "$report")"
grep -q "alpha_fwd 0.9, alpha_bkw 0.9 for both variants, from the config" "$report" ||
  fail "long: PN's alphas not reported as the config's"
[ ! -d "$tmp/lg/tune" ] && ! grep -q -- "--pn-alpha-fwd" "$tmp/lg/table/power_s1/cmd.txt" ||
  fail "long: tuned PN's alphas: $(cat "$tmp/lg/table/power_s1/cmd.txt")"
grep -q "reproduce_long_ptb.ini" "$tmp/lg/table/layer_s1/cmd.txt" || fail "long: not its config"
# Figure 5 at an epoch preset's budget: BN probed at every m, PN at m = update is the table's own
# cell (a table run afterwards finds it done); FIGURE5.md has both rows.
fflags=(--max-update 4 --validate-interval-updates 2 --save-interval-updates 2 --warmup-updates 2
        --decoder-layers 1 --decoder-embed-dim 32 --decoder-ffn-embed-dim 64)
out=$("$py" "$here/../../launcher/analysis/reproduce.py" --pntrain "$pntrain" --medium --figure5 --no-tune \
      --data builtin --norms batch,power --mini-batches 2048,4096 --out "$tmp/f5" -- "${fflags[@]}" 2>&1)
rc=$?
[ $rc -eq 0 ] || fail "figure5: exit $rc: $out"
grep -q "^| BN | 1 | [0-9.]* ([0-9.]*) | [0-9.]* ([0-9.]*) |" "$tmp/f5/FIGURE5.md" ||
  fail "figure5: no BN row: $(cat "$tmp/f5/FIGURE5.md")"
grep -q "^| BN | 2048 | 1 / 1 | [0-9.]* | [0-9.]* | [-+][0-9.]* .* fewer than 2 seeds on a side |$" \
  "$tmp/f5/FIGURE5.md" || fail "figure5: no m against m = 4096: $(cat "$tmp/f5/FIGURE5.md")"
grep -q -- "--max-tokens 2048 --update-freq 2" "$tmp/f5/figure5/batch_m2048_s1/cmd.txt" &&
  grep -q -- "--probe-norm-stats all" "$tmp/f5/figure5/batch_m4096_s1/cmd.txt" ||
  fail "figure5: BN cells' commands"
[ -f "$tmp/f5/table/power_s1/eval.json" ] || fail "figure5: PN at m = 4096 is not the table's cell"
# An invocation of one cell reports every cell on disk, not its own only.
"$py" "$here/../../launcher/analysis/reproduce.py" --pntrain "$pntrain" --medium --figure5 \
  --report-only --data builtin --norms batch --mini-batches 2048 --out "$tmp/f5" >/dev/null 2>&1
grep -q "^| PN (paper) | 1 | .* [0-9.]* ([0-9.]*) |$" "$tmp/f5/FIGURE5.md" &&
  grep -q "^| BN | 1 | [0-9.]* ([0-9.]*) | [0-9.]* ([0-9.]*) |" "$tmp/f5/FIGURE5.md" ||
  fail "figure5: one cell's report lost the others: $(cat "$tmp/f5/FIGURE5.md")"
out=$("$py" "$here/../../launcher/analysis/reproduce.py" --pntrain "$pntrain" --medium --no-tune --data builtin \
      --norms power --out "$tmp/f5" -- "${fflags[@]}" 2>&1)
grep -q "power .*seed 1: done before, skipped" <<<"$out" || fail "figure5: the table ran PN again: $out"
out=$("$py" "$here/../../launcher/analysis/reproduce.py" --pntrain "$pntrain" --medium --figure5 --data builtin \
      --out "$tmp/f5" -- --max-tokens 512 2>&1)
grep -q "max-tokens is set per Figure 5 cell" <<<"$out" || fail "figure5 with --max-tokens: $out"
# A run bounded by --max-epoch ends with its last update out of the updates that bound allows.
out=$("$pntrain" --max-epoch 1 --max-update 100000 --decoder-layers 1 --decoder-embed-dim 32 \
      --decoder-attention-heads 2 --decoder-ffn-embed-dim 64 --max-tokens 512 2>&1)
grep -qE "done \| ([0-9]+)/\1 updates" <<<"$out" ||
  fail "--max-epoch 1: the done line does not count to the epoch's last update: $(tail -2 <<<"$out")"
[ $failures -eq 0 ] && echo "reproduce smoke: all passed"
exit $((failures > 0))
