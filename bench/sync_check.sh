#!/usr/bin/env bash
# The statistics all-reduces inside training against the alpha-beta model, at 2-4 ranks on
# this machine (docs/benchmarks.md, "Synchronized statistics in groups").
#
# For each job and sync group (2 ranks in one group; 3 in one; 4 in groups of 2; 4 in one):
#  - pnbench --split-stats-wait --probe-allreduce trains sync_batch and sync_power at model
#    widths 64, 128, 256 and 512 (statistics messages of 0.5 to 8 KiB), timing the all-reduces
#    after a barrier has gathered the group (the transfer) apart from the wait for the group's
#    slowest rank; every other update probes the all-reduce's cost at 8 B to 16 KiB there;
#  - pnbench --predict sweeps the all-reduce back to back over message sizes and replays one
#    update's statistics.
# Then launcher/analysis/predict.py fits the sweep, checks each run's transfer against its probes and the
# replays against the sweep, and prints the scale-out table.
# Usage: bench/sync_check.sh [BUILD_DIR] [OUT_DIR]   (3 and 4 ranks oversubscribe 2 cores)
set -eu
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
out="${2:-sync_check}"
pnbench="$build/bin/pnbench"
[ -x "$pnbench" ] || { echo "sync_check: no $pnbench: build it first (launcher/pn build)" >&2; exit 2; }
py=/usr/bin/python3; [ -x "$py" ] || py=python3
mkdir -p "$out"
rm -f "$out/widths.csv" "$out/allreduce.csv" "$out/replay.csv" "$out/allreduce_in_training.csv"
mpirun_np() {
  local np="$1"; shift
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" -x OMP_NUM_THREADS=1 "$@"
}
for spec in "2 2" "3 3" "4 2" "4 4"; do
  set -- $spec
  for d in 64 128 256 512; do
    for norm in sync_batch sync_power; do
      mpirun_np "$1" "$pnbench" --split-stats-wait --probe-allreduce --predict-out "$out" \
        --mode weak --tokens 1024 --warmup 2 --measure 42 --config "$root/configs/default.ini" --threads 1 --norm "$norm" \
        --sync-group-size "$2" --decoder-embed-dim "$d" --csv "$out/widths.csv" \
        > "$out/train_np$1_k$2_d${d}_$norm.log" 2>&1
      grep "transfer after it" "$out/train_np$1_k$2_d${d}_$norm.log" | sed "s/^/np $1 K $2 d $d $norm: /"
    done
  done
  for norm in sync_batch sync_power; do
    mpirun_np "$1" "$pnbench" --predict --predict-out "$out" --config "$root/configs/default.ini" \
      --norm "$norm" --sync-group-size "$2" > "$out/predict_np$1_k$2_$norm.log" 2>&1
  done
done
"$py" "$root/launcher/analysis/predict.py" --sweep "$out/allreduce.csv" --bench "$out/widths.csv" --out "$out"
