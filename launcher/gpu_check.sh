#!/usr/bin/env bash
# pn gpu-check --bundle DIR --out REPORT_DIR: the GPU checks of pntrain in one call of under ten
# minutes, on a machine with a GPU, its driver and CUDA (cuBLAS, NCCL, compute-sanitizer) but
# none of pntrain's other dependencies, which DIR (from `pn gpu-bundle DIR`) brings.
#
# Steps, each with its own time limit, each recorded in REPORT_DIR/report.txt and report.json:
#   versions        nvidia-smi, the driver, nvcc
#   cuda_tests      every CUDA kernel and NCCL test with PN_CUDA_REQUIRED=1 (a skip fails)
#   memcheck        compute-sanitizer --tool memcheck over the kernel tests
#   racecheck       compute-sanitizer --tool racecheck over the kernel tests with shared memory
#   device_vs_cpu   the training comparisons: LM with every norm, translation, repeatability,
#                   checkpoints between devices (pn_tests' cuda cases, PN_CUDA_REQUIRED=1)
#   nccl_2ranks     2 ranks on the one GPU through the staged fallback, when MPI came along
#   norm_bench      every norm's forward + backward beside a device copy of the same bytes, at
#                   d 512 and 1024, 16K and 64K tokens (pnbench_cuda_norms)
#   throughput      configs/ptb_small.ini tokens/s on the GPU next to the CPU
#   vs_pytorch      the same config against PyTorch on the GPU (eager and torch.compile, fp32
#                   and bf16; bench/vs_pytorch/gpu.py), as far as its time budget goes
set -uo pipefail
BUNDLE="" OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0" | sed '1s/^/Usage: /'; exit 0 ;;  # the comment above
    *) echo "pn gpu-check: unknown argument '$1' (use --bundle DIR --out REPORT_DIR)" >&2; exit 2 ;;
  esac
done
[ -n "$BUNDLE" ] && [ -n "$OUT" ] || { echo "usage: pn gpu-check --bundle DIR --out REPORT_DIR" >&2; exit 2; }
[ -f "$BUNDLE/pn-gpu.tar.gz" ] || { echo "pn gpu-check: no $BUNDLE/pn-gpu.tar.gz: run 'pn gpu-bundle $BUNDLE' on a machine with the build dependencies" >&2; exit 2; }
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
B="$(mktemp -d)"
trap 'rm -rf "$B"' EXIT
tar -C "$B" -xzf "$BUNDLE/pn-gpu.tar.gz"
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PN_CUDA_REQUIRED=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-8}" PN_SOURCE_DIR="$ROOT"
: > "$OUT/report.txt"
echo "[" > "$OUT/steps.json"
first=1
# step NAME LIMIT_S COMMAND...: runs it with a time limit, its output in OUT/NAME.log.
step() {
  local name="$1" limit="$2"; shift 2
  local t0=$SECONDS rc
  # The whole check fits one call of ten minutes: a step that could overrun it is not started.
  if [ $((SECONDS + limit)) -gt 590 ]; then
    printf '%-14s %-8s %4ss  %s\n' "$name" "skipped" 0 "not started: the ten minutes are spent" |
      tee -a "$OUT/report.txt"
    [ $first -eq 1 ] || echo "," >> "$OUT/steps.json"
    first=0
    printf '{"step": "%s", "status": "skipped", "rc": -1, "seconds": 0}' "$name" >> "$OUT/steps.json"
    return
  fi
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  local secs=$((SECONDS - t0)) status=pass
  [ $rc -ne 0 ] && status=fail
  [ $rc -eq 124 ] && status=timeout
  printf '%-14s %-8s %4ss  %s\n' "$name" "$status" "$secs" "$(tail -n 1 "$OUT/$name.log" | cut -c1-120)" |
    tee -a "$OUT/report.txt"
  [ $first -eq 1 ] || echo "," >> "$OUT/steps.json"
  first=0
  printf '{"step": "%s", "status": "%s", "rc": %d, "seconds": %d}' "$name" "$status" "$rc" "$secs" >> "$OUT/steps.json"
}

echo "pn gpu-check of commit $(cat "$B/COMMIT") on $(hostname), $(date -u +%FT%TZ)" | tee -a "$OUT/report.txt"
step versions 30 bash -c 'nvidia-smi; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version || true'
step cuda_tests 120 "$B/bin/pn_cuda_tests" --gtest_output="json:$OUT/cuda_tests.json"
SAN="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
step memcheck 120 "$SAN" --tool memcheck --error-exitcode 1 "$B/bin/pn_cuda_tests" \
  --gtest_filter='CudaKernels.*:CudaNormKernels.*:CudaNormLayers.*'
step racecheck 90 "$SAN" --tool racecheck --error-exitcode 1 "$B/bin/pn_cuda_tests" \
  --gtest_filter='CudaKernels.AttentionDecodingStep:CudaKernels.LabelSmoothedCrossEntropy:CudaNormKernels.*'
step device_vs_cpu 120 "$B/bin/pn_tests" --gtest_filter='*cuda*:Devices.*' \
  --gtest_output="json:$OUT/device_vs_cpu.json"
if [ -x "$B/mpi/bin/mpirun" ] && [ -x "$B/bin/pn_cuda_mpi_tests" ]; then
  export OMPI_MCA_mca_base_component_path="$B/mpi/plugins" OPAL_PKGDATADIR="$B/mpi/share"
  step nccl_2ranks 45 "$B/mpi/bin/mpirun" --allow-run-as-root --oversubscribe --bind-to none -np 2 \
    "$B/bin/pn_cuda_mpi_tests"
fi
step norm_bench 60 bash -c "for shape in '16384 512' '16384 1024' '65536 512' '65536 1024'; do
  \"$B/bin/pnbench_cuda_norms\" \$shape || exit 1; done"
if [ -d "$B/ptb" ]; then
  for run in cuda:fp32 cuda_tf32:tf32 cpu:fp32; do
    dev="${run%%:*}"
    step "throughput_$dev" 60 "$B/bin/pntrain" --config "$ROOT/configs/ptb_small.ini" \
      --data "$B/ptb" --device "${dev%_tf32}" --precision "${run#*:}" --max-update 25 \
      --validate-interval-updates 0 --log-interval 10 --metrics "$OUT/throughput_$dev.jsonl"
  done
  python3 - "$OUT" >> "$OUT/report.txt" <<'PY' || true
import json, statistics, sys
out = sys.argv[1]
rate = {}
for dev in ("cuda", "cuda_tf32", "cpu"):
    try:
        rows = [json.loads(l) for l in open(f"{out}/throughput_{dev}.jsonl")]
        tps = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r][5:]
        rate[dev] = statistics.median(tps)
    except Exception as e:
        rate[dev] = None
print("throughput     ptb_small.ini tokens/s (median of updates 6-25): "
      f"cuda {rate['cuda']}, cuda tf32 {rate['cuda_tf32']}, cpu {rate['cpu']}"
      + (f", ratio {rate['cuda'] / rate['cpu']:.1f}" if rate["cuda"] and rate["cpu"] else ""))
PY
fi
if [ -d "$B/ptb" ]; then
  left=$((575 - SECONDS))
  if ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    printf '%-14s %-8s %4ss  %s\n' vs_pytorch skipped 0 "no PyTorch with CUDA in python3 here" |
      tee -a "$OUT/report.txt"
  elif [ $left -gt 60 ]; then
    step vs_pytorch $left python3 "$ROOT/bench/vs_pytorch/gpu.py" --pntrain "$B/bin/pntrain" \
      --data "$B/ptb" --norms layer,power,batch --budget-s $((left - 10)) --out "$OUT/vs_pytorch"
    tail -n 6 "$OUT/vs_pytorch.log" >> "$OUT/report.txt"
  else
    printf '%-14s %-8s %4ss  %s\n' vs_pytorch skipped 0 "not started: the ten minutes are spent" |
      tee -a "$OUT/report.txt"
  fi
fi
echo "]" >> "$OUT/steps.json"
python3 - "$OUT" <<'PY' || true
import json, sys
out = sys.argv[1]
steps = json.load(open(f"{out}/steps.json"))
report = open(f"{out}/report.txt").read()
json.dump({"steps": steps, "report": report,
           "passed": all(s["status"] == "pass" for s in steps) and " skipped " not in report},
          open(f"{out}/report.json", "w"), indent=1)
PY
if grep -qE ' (fail|timeout|skipped) ' "$OUT/report.txt"; then
  echo "pn gpu-check: FAILED (see $OUT/report.txt and the step logs)"; exit 1
fi
echo "pn gpu-check: every step passed ($OUT/report.txt)"
