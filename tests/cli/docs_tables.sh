#!/bin/bash
# launcher/analysis/doc_tables.py on a fixture (tests/cli/docs_fixture: a README with a results
# and a findings block, a report.json and report-less cells): --write fills the blocks from the
# records and --check then passes; a number changed in a record makes --check fail naming the
# file, and --write repairs it; a commit hash, a paragraph over 150 words and an over-long
# README each make --check fail.
set -u
root="$1"
gen="$root/launcher/analysis/doc_tables.py"
py=/usr/bin/python3; [ -x "$py" ] || py=python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures+1)); }
fresh() { rm -rf "$tmp/f"; cp -r "$root/tests/cli/docs_fixture" "$tmp/f"; }

fresh
"$py" "$gen" --root "$tmp/f" --check >"$tmp/out" 2>&1 && fail "empty blocks pass --check"
grep -q "README.md: a generated table differs" "$tmp/out" || fail "no culprit named: $(cat "$tmp/out")"
"$py" "$gen" --root "$tmp/f" --write >/dev/null || fail "--write failed"
"$py" "$gen" --root "$tmp/f" --check >"$tmp/out" 2>&1 || fail "--check after --write: $(cat "$tmp/out")"
grep -q "120.77 ± 0.54 (3), -1.3% \[-2.91, -0.31\], p<sub>Holm</sub> 0.098" "$tmp/f/README.md" \
    || fail "the report's LN-relative figures are not in the table"
grep -q "126.75 ± 0.35 (2)" "$tmp/f/README.md" || fail "the report-less cells' mean is not in the table"
grep -q "0.098 after Holm: suggestive" "$tmp/f/README.md" || fail "the findings are not written"

# A number changed in a committed record: --check fails, --write regenerates, --check passes.
sed -i 's/"mean": 120.77/"mean": 120.87/' "$tmp/f/results/reproduce_lm_long/report.json"
"$py" "$gen" --root "$tmp/f" --check >"$tmp/out" 2>&1 && fail "a changed record passes --check"
"$py" "$gen" --root "$tmp/f" --write >/dev/null
grep -q "120.87 ± 0.54" "$tmp/f/README.md" || fail "--write did not take the changed record"
"$py" "$gen" --root "$tmp/f" --check >/dev/null 2>&1 || fail "--check after regenerating"
echo "{\"valid_ppl\": 1, \"test_ppl\": 99.0}" >"$tmp/f/results/reproduce_lm_medium/table/layer_s1/eval.json"
"$py" "$gen" --root "$tmp/f" --check >/dev/null 2>&1 && fail "a changed cell passes --check"

# The rules of the docs.
fresh; "$py" "$gen" --root "$tmp/f" --write >/dev/null
echo "Measured at commit 5d54aef (a hash)." >>"$tmp/f/docs/gpu.md"
"$py" "$gen" --root "$tmp/f" --check >"$tmp/out" 2>&1 && fail "a commit hash passes"
grep -q "docs/gpu.md:4: commit hash 5d54aef" "$tmp/out" || fail "hash not named: $(cat "$tmp/out")"
# A hex prefix without the word "commit", resolving nowhere, reads as a commit all the same.
fresh; "$py" "$gen" --root "$tmp/f" --write >/dev/null
echo 'The split (sha256 `27660c68...`).' >>"$tmp/f/docs/gpu.md"
"$py" "$gen" --root "$tmp/f" --check >"$tmp/out" 2>&1 && fail "a bare hex prefix passes"
grep -q "commit hash 27660c68" "$tmp/out" || fail "hex prefix not named: $(cat "$tmp/out")"
fresh; "$py" "$gen" --root "$tmp/f" --write >/dev/null
{ echo; for i in $(seq 151); do printf 'word '; done; echo; } >>"$tmp/f/README.md"
"$py" "$gen" --root "$tmp/f" --check >"$tmp/out" 2>&1 && fail "a 151-word paragraph passes"
grep -q "a paragraph of 151 words" "$tmp/out" || fail "long paragraph not named: $(cat "$tmp/out")"
fresh; "$py" "$gen" --root "$tmp/f" --write >/dev/null
seq 160 >>"$tmp/f/README.md"
"$py" "$gen" --root "$tmp/f" --check >"$tmp/out" 2>&1 && fail "a README over 160 lines passes"
grep -q "README.md: [0-9]* lines, at most 160" "$tmp/out" || fail "length not named: $(cat "$tmp/out")"

[ "$failures" = 0 ] && echo "docs_tables: all passed"
exit "$failures"
