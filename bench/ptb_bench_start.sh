# The start that the PTB benchmark scripts share (sourced): their arguments
# [BUILD_DIR [PTB_DIR [OUT_DIR]]], build/, ../shared/data/ptb and a new temporary directory by
# default (relative to the repository root when not given, to the current directory when given),
# the pntrain and the corpus they need, and the CPU's name. Sets ROOT BUILD PTB OUT PNTRAIN CPU.
#   ptb_bench_start NAME "$@"      (NAME: the script's name, for messages and the temporary dir)
ptb_bench_start() {
  local name="$1"
  shift
  ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  abs() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
  BUILD="$(abs "${1:-$ROOT/build}")"
  PTB="$(abs "${2:-$ROOT/../shared/data/ptb}")"
  OUT="${3:-$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")}"
  mkdir -p "$OUT"
  OUT="$(cd "$OUT" && pwd)"
  PNTRAIN="$BUILD/bin/pntrain"
  [ -x "$PNTRAIN" ] || { echo "$name.sh: no $PNTRAIN (build first)" >&2; exit 1; }
  [ -f "$PTB/train.txt" ] || { echo "$name.sh: no $PTB/train.txt" >&2; exit 1; }
  CPU="$(grep -m1 -E '^(model name|Model)' /proc/cpuinfo | sed 's/^[^:]*:[[:space:]]*//')"
}
