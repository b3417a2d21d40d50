#!/usr/bin/env bash
# ptb_throughput.sh: training throughput of pntrain on the Penn Treebank with configs/ptb_small.ini,
# at 1 rank (2 threads) and at 2 ranks (mpirun -np 2, 1 thread each).
#
#   bench/ptb_throughput.sh [BUILD_DIR [PTB_DIR [OUT_DIR]]]
#
# BUILD_DIR defaults to build/ and PTB_DIR to ../shared/data/ptb, both relative to the
# repository root when not given; paths that are given are taken relative to the current
# directory. OUT_DIR (default: a new temporary directory) receives the metrics JSONL files and
# logs. Each run is `pntrain --data PTB --config configs/ptb_small.ini --max-update 60
# --validate-interval-updates 0 --metrics FILE`; the figure printed is the median tokens_per_s
# of updates 11..60 (the first 10 are warm-up: page faults, allocator growth, thread start).
# Environment: MAX_UPDATE (default 60), FIRST_UPDATE (default 11), MPIRUN (default mpirun),
# MPIRUN_ARGS (extra mpirun arguments; --allow-run-as-root is added when run as root).
set -euo pipefail

# shellcheck source=bench/ptb_bench_start.sh
. "$(dirname "${BASH_SOURCE[0]}")/ptb_bench_start.sh"
ptb_bench_start ptb_throughput "$@"
MAX_UPDATE="${MAX_UPDATE:-60}"
FIRST_UPDATE="${FIRST_UPDATE:-11}"
MPIRUN="${MPIRUN:-mpirun}"
MPI_FLAGS=(${MPIRUN_ARGS:-})
[ "$(id -u)" -eq 0 ] && MPI_FLAGS=(--allow-run-as-root "${MPI_FLAGS[@]}")

COMMON=(--data "$PTB" --config "$ROOT/configs/ptb_small.ini" --max-update "$MAX_UPDATE"
        --validate-interval-updates 0)

# Median tokens_per_s of the per-update records with FIRST_UPDATE <= update <= MAX_UPDATE.
median_tps() {
  python3 - "$1" "$FIRST_UPDATE" "$MAX_UPDATE" <<'PY'
import json, statistics, sys
path, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
v = []
with open(path) as f:
    for line in f:
        line = line.strip()
        if not line:
            continue
        j = json.loads(line)
        if "tokens_per_s" in j and "update" in j and lo <= j["update"] <= hi:
            v.append(float(j["tokens_per_s"]))
if not v:
    sys.exit("no per-update records %d..%d in %s" % (lo, hi, path))
print("%.0f %d" % (statistics.median(v), len(v)))
PY
}

cd "$ROOT"
echo "ptb_throughput: CPU: $CPU | cores: $(nproc) | build: $BUILD | data: $PTB"
echo "config configs/ptb_small.ini, $MAX_UPDATE updates, median tokens_per_s of updates" \
     "$FIRST_UPDATE..$MAX_UPDATE (indicative: other load on the machine lowers it)"

echo "running 1 rank x 2 threads ..." >&2
"$PNTRAIN" "${COMMON[@]}" --threads 2 --metrics "$OUT/np1.jsonl" > "$OUT/np1.log" 2>&1 ||
  { echo "1-rank run failed, see $OUT/np1.log" >&2; tail -5 "$OUT/np1.log" >&2; exit 1; }
echo "running 2 ranks x 1 thread ..." >&2
"$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$PNTRAIN" "${COMMON[@]}" --threads 1 \
  --metrics "$OUT/np2.jsonl" > "$OUT/np2.log" 2>&1 ||
  { echo "2-rank run failed, see $OUT/np2.log" >&2; tail -5 "$OUT/np2.log" >&2; exit 1; }

read -r TPS1 N1 < <(median_tps "$OUT/np1.jsonl")
read -r TPS2 N2 < <(median_tps "$OUT/np2.jsonl")
printf '%-22s %14s %9s\n' "setup" "tokens_per_s" "updates"
printf '%-22s %14s %9s\n' "1 rank x 2 threads" "$TPS1" "$N1"
printf '%-22s %14s %9s\n' "2 ranks x 1 thread" "$TPS2" "$N2"
echo "metrics and logs in $OUT"
