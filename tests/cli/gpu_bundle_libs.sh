#!/usr/bin/env bash
# The GPU bundle's libraries and gpu-check's report, on a machine without a GPU:
#  - launcher/gpu/bundle_libs.sh check accepts pntrain beside the libraries ldd finds (less the C
#    library and CUDA) and refuses the same folder with one library removed, naming it;
#  - gpu-check on a bundle whose executable needs a library that is nowhere says so in one line
#    (the "libraries" step), starts no other step that needs the bundle, and writes report.json;
#    a missing symbol is named the same way;
#  - a check killed in the middle of a step still leaves report.json, naming the step killed,
#    and leaves no process behind; a step that could end past --budget-s is not started.
# Usage: gpu_bundle_libs.sh PNTRAIN
set -euo pipefail
pntrain="$1"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
libs="$root/launcher/gpu/bundle_libs.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
no() { echo "FAIL: $*"; fail=1; }

# ---- the static check over a staged folder ----
stage="$work/stage"
mkdir -p "$stage/bin" "$stage/lib"
cp "$pntrain" "$stage/bin/pntrain"
# shellcheck source=launcher/gpu/bundle_libs.sh
. "$libs"
ldd "$pntrain" | awk '/=> \//{print $3}' | while read -r lib; do
  bundle_provided_lib "$(basename "$lib")" || cp -L "$lib" "$stage/lib/"
done
"$libs" check "$stage" > "$work/check.out" || no "a complete folder is refused: $(cat "$work/check.out")"
victim=$(ls "$stage/lib" | grep -m 1 -E '^lib(glog|boost_program_options|openblas|gomp)') ||
  victim=$(ls "$stage/lib" | head -n 1)
rm "$stage/lib/$victim"
if "$libs" check "$stage" > "$work/check.out"; then
  no "a folder without $victim passes the check"
else
  grep -q "^$victim (needed by " "$work/check.out" || no "the refusal does not name $victim: $(cat "$work/check.out")"
fi
[ -n "$("$libs" glibc "$stage")" ] || no "no GLIBC_ version found in pntrain"

# ---- a library that is nowhere, a symbol that is not there ----
cc=$(command -v cc || command -v gcc)
mkdir -p "$work/src" "$work/b1/bin" "$work/b1/lib"
cat > "$work/src/dep.c" <<'C'
int pn_dep_value(void) { return 7; }
C
cat > "$work/src/main.c" <<'C'
int pn_dep_value(void);
int main(void) { return pn_dep_value() == 7 ? 0 : 1; }
C
echo 'int pn_other(void) { return 1; }' > "$work/src/dep2.c"
"$cc" -shared -fPIC -o "$work/src/libpn_gone.so" "$work/src/dep.c"
"$cc" -o "$work/b1/bin/uses_gone" "$work/src/main.c" -L"$work/src" -lpn_gone
echo test > "$work/b1/COMMIT"
tar -C "$work/b1" -czf "$work/b1/pn-gpu.tar.gz" bin COMMIT
rc=0
PN_SKIP_SETUP=1 "$root/launcher/pn" gpu-check --bundle "$work/b1" --out "$work/r1" > "$work/r1.out" 2>&1 || rc=$?
[ $rc -eq 1 ] || no "gpu-check with a missing library exits $rc"
grep -qE '^libraries +fail .*bin/uses_gone: libpn_gone.so => not found' "$work/r1/report.txt" ||
  no "the report does not name the missing library in one line: $(cat "$work/r1/report.txt")"
grep -qE '^cuda_tests +skipped .*not started: libraries' "$work/r1/report.txt" ||
  no "cuda_tests was started without its libraries: $(grep cuda_tests "$work/r1/report.txt")"
python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["finished"] is True and r["passed"] is False, r
steps = {s["step"]: s for s in r["steps"]}
assert steps["libraries"]["status"] == "fail" and "libpn_gone.so" in steps["libraries"]["detail"], steps
' "$work/r1/report.json" || no "report.json is not the report: $(cat "$work/r1/report.json")"
# The symbol: built against a library that defines it, bundled with one that does not.
"$cc" -shared -fPIC -o "$work/b1/lib/libpn_gone.so" "$work/src/dep2.c"
out=$(LD_LIBRARY_PATH="$work/b1/lib" "$libs" runtime "$work/b1") &&
  no "a missing symbol passes: $out"
grep -q 'bin/uses_gone: undefined symbol: pn_dep_value' <<<"$out" || no "the missing symbol is not named: $out"
cp "$work/src/libpn_gone.so" "$work/b1/lib/"
out=$(LD_LIBRARY_PATH="$work/b1/lib" "$libs" runtime "$work/b1") || no "a complete bundle fails: $out"

# ---- killed in the middle of a step; the budget ----
tar -C "$work/b1" -czf "$work/b1/pn-gpu.tar.gz" bin lib COMMIT
mkdir "$work/fake"
printf '#!/bin/sh\necho $$ > "%s/smi.pid"\nexec sleep 60\n' "$work" > "$work/fake/nvidia-smi"
chmod +x "$work/fake/nvidia-smi"
PATH="$work/fake:$PATH" "$root/launcher/gpu/gpu_check.sh" --bundle "$work/b1" --out "$work/r2" \
  > "$work/r2.out" 2>&1 &
check_pid=$!
for _ in $(seq 100); do [ -s "$work/smi.pid" ] && break; sleep 0.2; done
kill -TERM "$check_pid"
rc=0
wait "$check_pid" || rc=$?
[ $rc -eq 143 ] || no "a killed gpu-check exits $rc, not 143"
python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["finished"] is False and r["passed"] is False, r
assert r["steps"][0]["step"] == "versions" and r["steps"][0]["status"] == "killed", r["steps"]
' "$work/r2/report.json" || no "report.json of a killed check: $(cat "$work/r2/report.json" 2>&1)"
sleep 1
# Alive means running: a killed step left to a container's PID 1 may stay a zombie (state Z).
if [ -s "$work/smi.pid" ] && ps -o stat= -p "$(cat "$work/smi.pid")" 2>/dev/null | grep -qv '^Z'; then
  no "the step's process outlived the killed check"
  kill "$(cat "$work/smi.pid")"
fi
rc=0
"$root/launcher/gpu/gpu_check.sh" --bundle "$work/b1" --out "$work/r3" --budget-s 45 > "$work/r3.out" 2>&1 || rc=$?
grep -qE '^libraries +pass ' "$work/r3/report.txt" || no "the library check of a complete bundle: $(cat "$work/r3/report.txt")"
grep -qE '^cuda_tests +skipped .*could end past the 45 s budget' "$work/r3/report.txt" ||
  no "a 90 s step was started within a 45 s budget: $(cat "$work/r3/report.txt")"
[ $fail = 0 ] && echo "ok: a missing library is refused by name, reported in one line by gpu-check; report.json survives a kill"
exit $fail
