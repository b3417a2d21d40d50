#!/usr/bin/env bash
# Valid perplexity of every norm after the same short PTB budget, under mpirun -np 2
# (the norm speed table). Usage: bench/norm_table.sh [BUILD] [PTB] [UPDATES] [OUTDIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"; ptb="${2:-$root/../shared/data/ptb}"; updates="${3:-300}"
out="${4:-$(mktemp -d)}"; mkdir -p "$out"
mpi=(mpirun -np 2 --bind-to none); [ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; 2 ranks"
echo "config: configs/ptb_small.ini, --max-update $updates --warmup-updates 100 --dropout 0.1"
printf '%-14s %10s %10s %12s %10s\n' norm valid_loss valid_ppl tokens/s wall_s
for norm in layer batch sync_batch power_v sync_power_v power sync_power; do
  m="$out/$norm.jsonl"
  t0=$(date +%s)
  "${mpi[@]}" "$build/bin/pntrain" --data "$ptb" --config "$root/configs/ptb_small.ini" \
    --norm "$norm" --max-update "$updates" --warmup-updates 100 --dropout 0.1 \
    --validate-interval-updates "$updates" --metrics "$m" > "$out/$norm.log" 2>&1
  t1=$(date +%s)
  /usr/bin/python3 - "$m" "$norm" $((t1 - t0)) <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
valid = [r for r in rows if "valid_loss" in r][-1]
tps = statistics.median(r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r["update"] > 10)
print(f"{sys.argv[2]:<14} {valid['valid_loss']:10.3f} {valid['valid_ppl']:10.1f} {tps:12.0f} {sys.argv[3]:>10}")
PY
done
echo "logs and metrics: $out"
