#!/usr/bin/env bash
# `launcher/pn VERB --help` and `-h`, for every verb of the usage text: exit 0, VERB's usage on
# stdout, and nothing else happens: no package check, no cmake, mpirun or python (stand-ins on
# PATH record any call), no build folder, no file or folder in the working directory or in the
# repository. Also `pn help VERB`, and the GPU scripts' own --help.
# Usage: help.sh PN
set -euo pipefail
pn="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
root="$(cd "$(dirname "$pn")/.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/fake" "$work/cwd"
for tool in cmake ctest make mpirun python3 apt-get dpkg-query sudo nvcc tar; do
  printf '#!/bin/sh\necho "%s $*" >> "%s/called"\nexit 3\n' "$tool" "$work" > "$work/fake/$tool"
  chmod +x "$work/fake/$tool"
done
verbs=$("$pn" help | awk '/^Verbs:/ {on = 1; next} /^$/ {on = 0} on && /^  [a-z]/ {print $1}')
[ "$(wc -w <<<"$verbs")" -ge 12 ] || { echo "FAIL: only these verbs in the usage text: $verbs"; exit 1; }
before=$(ls -A "$root")
fail=0
check() {  # check LABEL VERB COMMAND...: exit 0, a Usage line naming VERB, no side effect
  local label="$1" verb="$2"; shift 2
  [ "$verb" = help ] && verb=VERB  # `pn help --help` is the whole text
  local out rc=0
  out=$(cd "$work/cwd" && PATH="$work/fake:$PATH" PN_SKIP_SETUP=1 PN_BUILD_DIR="$work/build" \
        "$@" 2>"$work/err") || rc=$?
  [ $rc -eq 0 ] || { echo "FAIL: $label exits $rc: $(cat "$work/err")"; fail=1; }
  grep -q "^Usage: .*$verb" <<<"$out" || { echo "FAIL: $label prints no usage of $verb: $(head -n 2 <<<"$out")"; fail=1; }
  [ ! -e "$work/called" ] || { echo "FAIL: $label ran: $(cat "$work/called")"; fail=1; rm -f "$work/called"; }
  [ ! -e "$work/build" ] || { echo "FAIL: $label made the build folder"; fail=1; rm -rf "$work/build"; }
  [ -z "$(ls -A "$work/cwd")" ] || { echo "FAIL: $label wrote $(ls -A "$work/cwd")"; fail=1; rm -rf "$work/cwd"/*; }
  [ "$(ls -A "$root")" = "$before" ] || { echo "FAIL: $label changed the repository's top folder"; fail=1; }
}
for verb in $verbs; do
  for flag in --help -h; do check "pn $verb $flag" "$verb" "$pn" "$verb" "$flag"; done
  check "pn help $verb" "$verb" "$pn" help "$verb"
done
check "pn run CONFIG --help" run "$pn" run configs/default.ini --help
check "pn gpu-bundle DIR --help" gpu-bundle "$pn" gpu-bundle some-dir --help
check "gpu_check.sh --help" gpu-check "$root/launcher/gpu/gpu_check.sh" --help
check "gpu_bundle.sh --help" gpu-bundle "$root/launcher/gpu/gpu_bundle.sh" --help
# After `--` a --help belongs to pntrain: pn must not take it (here the config is missing).
rc=0
(cd "$work/cwd" && PATH="$work/fake:$PATH" PN_SKIP_SETUP=1 "$pn" run no-such.ini -- --help) \
  >/dev/null 2>"$work/err" || rc=$?
{ [ $rc -eq 2 ] && grep -q "no config file 'no-such.ini'" "$work/err"; } ||
  { echo "FAIL: 'pn run no-such.ini -- --help' gave exit $rc: $(cat "$work/err")"; fail=1; }
rc=0
"$pn" no-such-verb --help >/dev/null 2>"$work/err" || rc=$?
[ $rc -eq 2 ] || { echo "FAIL: an unknown verb with --help exits $rc, not 2"; fail=1; }
[ $fail = 0 ] && echo "ok: $(wc -w <<<"$verbs") verbs answer --help, -h and 'help VERB' with their usage and nothing else"
exit $fail
