#!/usr/bin/env bash
# bf16_cpu.sh: what --precision bf16 buys on this CPU: configs/ptb_small.ini on the Penn Treebank,
# 1 rank x 2 threads, in fp32, in bf16 (oneDNN's bf16 matmul where the CPU has AVX512_BF16) and in
# bf16 emulated (PN_CPU_WITHOUT=avx512_bf16 PN_BF16_EMULATE=1: the same numerics on fp32 sgemm).
#
#   bench/bf16_cpu.sh [BUILD_DIR [PTB_DIR [OUT_DIR]]]
#
# Defaults as bench/ptb_throughput.sh's. The three runs are repeated REPEATS times (default 3),
# interleaved, so that a drift of the machine spreads over all three; each figure is the median
# tokens_per_s of updates FIRST_UPDATE..MAX_UPDATE (defaults 6..25), and the table gives the
# median of the repeats with their range. PyTorch beside it: bench/vs_pytorch/cpu.sh.
set -euo pipefail

# shellcheck source=bench/ptb_bench_start.sh
. "$(dirname "${BASH_SOURCE[0]}")/ptb_bench_start.sh"
ptb_bench_start bf16_cpu "$@"
REPEATS="${REPEATS:-3}"
MAX_UPDATE="${MAX_UPDATE:-25}"
FIRST_UPDATE="${FIRST_UPDATE:-6}"

FLAGS="$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'avx512_bf16|amx_bf16|amx_tile' |
         tr '\n' ' ')"
echo "bf16_cpu: CPU: $CPU (${FLAGS:-no bf16 flags}) | cores: $(nproc) | build: $BUILD"
# OpenBLAS 0.3.21 (Debian 12) takes CPUs it does not know for a Prescott (SSE3), which runs the
# fp32 GEMMs, and the emulated bf16 ones, at a third of an AVX-512 kernel's speed: say which it
# chose (OPENBLAS_CORETYPE=SkylakeX overrides it).
OPENBLAS_SO="$(ldd "$PNTRAIN" | awk '/libopenblas/ {print $3; exit}')"
CORE="$(python3 -c 'import ctypes, sys
lib = ctypes.CDLL(sys.argv[1]); lib.openblas_get_corename.restype = ctypes.c_char_p
print(lib.openblas_get_corename().decode())' "$OPENBLAS_SO" 2>/dev/null || echo unknown)"
echo "OpenBLAS kernels of its own choice: $CORE (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; pntrain sets it where that is a pre-AVX2 core, and its device line says so)"
echo "configs/ptb_small.ini, 1 rank x 2 threads, dropout 0, median tokens_per_s of updates" \
     "$FIRST_UPDATE..$MAX_UPDATE, $REPEATS repeat(s)"

run() {  # run NAME [VAR=VALUE ...] -- pntrain flags
  local name="$1"; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$PNTRAIN" --config "$ROOT/configs/ptb_small.ini" --data "$PTB" --cpu \
    --threads 2 --dropout 0 --validate-interval-updates 0 --max-update "$MAX_UPDATE" \
    --log-interval 5 --metrics "$OUT/$name.jsonl" "$@" > "$OUT/$name.log" 2>&1 ||
    { echo "$name failed, see $OUT/$name.log" >&2; tail -5 "$OUT/$name.log" >&2; exit 1; }
}

for r in $(seq 1 "$REPEATS"); do
  echo "repeat $r of $REPEATS ..." >&2
  run "fp32_$r" -- --precision fp32
  run "bf16_$r" -- --precision bf16
  run "bf16_emulated_$r" PN_CPU_WITHOUT=avx512_bf16 PN_BF16_EMULATE=1 -- --precision bf16
done
grep -ho "GEMMs in bf16.*" "$OUT/bf16_1.log" "$OUT/bf16_emulated_1.log"

python3 - "$OUT" "$REPEATS" "$FIRST_UPDATE" "$MAX_UPDATE" <<'PY'
import json, statistics, sys
out, repeats, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def tps(name):
    rows = [json.loads(l) for l in open("%s/%s.jsonl" % (out, name)) if l.strip()]
    return statistics.median(r["tokens_per_s"] for r in rows
                             if "tokens_per_s" in r and lo <= r.get("update", 0) <= hi)

figs = {k: [tps("%s_%d" % (k, r)) for r in range(1, repeats + 1)]
        for k in ("fp32", "bf16", "bf16_emulated")}
med = {k: statistics.median(v) for k, v in figs.items()}
print("%-14s %12s  %s" % ("precision", "tokens/s", "range"))
for k, v in figs.items():
    print("%-14s %12.0f  %.0f-%.0f" % (k, med[k], min(v), max(v)))
print("bf16 / fp32 %.2f, bf16 / bf16 emulated %.2f, bf16 emulated / fp32 %.2f" % (
    med["bf16"] / med["fp32"], med["bf16"] / med["bf16_emulated"],
    med["bf16_emulated"] / med["fp32"]))
json.dump({"tokens_per_s": figs, "median": med}, open(out + "/bf16_cpu.json", "w"), indent=1)
PY
echo "metrics and logs in $OUT"
