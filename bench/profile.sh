#!/usr/bin/env bash
# Records where pntrain spends its CPU time on configs/ptb_small.ini (perf, 1 rank, 1 thread so
# that OpenMP waiting does not blur the shares) and prints the share of each category.
#
#   bench/profile.sh [--build DIR] [--updates N] [--data DIR] [--out FILE.data] [-- FLAGS]
#
# The first update's allocations and the corpus load are included; with N >= 16 they are a few
# percent. Compare two builds with bench/perf_shares.py A.data B.data.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"; UPDATES=16; DATA="$ROOT/../shared/data/ptb"; OUT=/tmp/pntrain_perf.data
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --updates) UPDATES="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "profile.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
command -v perf >/dev/null || { echo "profile.sh: perf not found (apt-get install linux-perf)" >&2; exit 1; }
[ -x "$BUILD/bin/pntrain" ] || { echo "profile.sh: no $BUILD/bin/pntrain; build it first" >&2; exit 1; }
[ -d "$DATA" ] || { echo "profile.sh: data '$DATA' not found; pass --data DIR (or 'builtin')" >&2; exit 1; }
echo "profile.sh: $(lscpu | sed -n 's/^Model name: *//p'), 1 thread, $UPDATES updates of configs/ptb_small.ini"
OMP_NUM_THREADS=1 perf record -F 299 -o "$OUT" -- "$BUILD/bin/pntrain" --data "$DATA" \
  --config "$ROOT/configs/ptb_small.ini" --max-update "$UPDATES" --validate-interval-updates 0 \
  --log-interval "$UPDATES" --threads 1 "$@" 2>&1 | grep -E "tok/s" || true
/usr/bin/python3 "$ROOT/bench/perf_shares.py" "$OUT"
