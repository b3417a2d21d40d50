#!/usr/bin/env bash
# pn gpu-check --bundle DIR --out REPORT_DIR: the GPU checks of pntrain in one call of under ten
# minutes, on a machine with a GPU, its driver and CUDA (cuBLAS, NCCL, compute-sanitizer) but
# none of pntrain's other dependencies, which DIR (from `pn gpu-bundle DIR`) brings.
#
# Options: --steps NAME,NAME runs only those steps (to rerun what failed); --budget-s S is the
# whole check's time (default 570, so that it ends inside a call of ten minutes); --compare
# 'CONFIG:CORPUS:NORMS ...' the speed comparisons, in order (default: gpt2_small_wt2 on
# wikitext-2, then ptb_small on ptb, each with layer,power); what the budget leaves out is named;
# --compare-args 'ARGS' adds ARGS to each compare.py (e.g. '--precisions bf16 --torch
# eager,compile,plain-compile --pntrain-precisions bf16,fp32': the columns that matter first).
#
# Steps in this order, correctness first and measurements last, each with its own time limit
# (seconds, in brackets); a step that would end past the budget is not started. Every step is
# recorded in REPORT_DIR/report.txt and report.json, which is rewritten before and after each
# step and when the check is killed, so a report is there whatever ends the call:
#   versions        [20] nvidia-smi, the driver, nvcc
#   libraries       [20] every library and symbol of the bundled executables resolves here
#                   (ldd -r), the first gap in one line; without it no other step starts
#   cuda_tests      [60] every CUDA kernel and NCCL test with PN_CUDA_REQUIRED=1 (a skip fails)
#   device_vs_cpu   [60] the training comparisons: LM with every norm, translation,
#                   repeatability, checkpoints between devices (pn_tests' cuda cases)
#   memcheck        [60] compute-sanitizer --tool memcheck over the kernel tests
#   racecheck       [60] compute-sanitizer --tool racecheck over the kernel tests with shared
#                   memory
#   memcheck_training [45] compute-sanitizer --tool memcheck over three training comparisons
#                   (BN and PN LMs, translation with beam search): every kernel of a whole run
#   nccl_2ranks     [30] 2 ranks on the one GPU through the staged fallback (and training in
#                   sync groups there against the CPU), when MPI came along
#   norm_bench      [40] every norm layer's forward and backward as shares of a device copy's
#                   bandwidth, with L2 flushed between repetitions, at d 512, 768 and 1024, 16K
#                   and 64K tokens (pnbench_norms --device cuda): fp32 and as training runs them
#                   (residual add in, bf16 out), each norm's bytes its real reads and writes
#   norm_profile    [90] only when --steps names it: Nsight Compute's bandwidth, occupancy and
#                   warp-stall sections of LN's, BN's and PN's kernels (norm_profile.txt)
#   profile         [150] only when --steps names it: Nsight Compute's time of every kernel of
#                   one update of configs/gpt2_small_wt2.ini in bf16, summed by kernel name
#                   (profile_kernels.txt, largest first); then profile_power [75], the same
#                   with --norm power (profile_power_kernels.txt)
#   experiments     [60] the kernel experiments of dev/cuda (bin/dev_*), each checked against
#                   the CPU and timed beside the product's kernel with L2 flushed between
#                   repetitions (experiments.log)
#   throughput_*    [20-25 each, 45] configs/ptb_small.ini tokens/s on the GPU in fp32 (its
#                   micro-steps as CUDA graphs, then launch by launch: --cuda-graphs off) and
#                   tf32 and on the CPU; configs/reproduce_long_ptb.ini (the --long cells'
#                   model, fp32) with and without graphs (--steps throughput runs them all)
#   vs_pytorch      [what is left] pntrain in bf16 (cuDNN's attention), fp32 and bf16 with
#                   --attention materialized against PyTorch on the GPU (the twin eager and torch.compile, fp32 and
#                   bf16 autocast, and for LM configs the plain model of the same shape,
#                   bench/vs_pytorch/plain_gpt.py; bench/vs_pytorch/compare.py), config by
#                   config in --compare's order: tokens/s, peak GPU memory, MFU
#   reproduce       [what is left] only when --steps names it: `pn reproduce --device cuda`,
#                   by default the declared protocol in two stages: --long with the five norms
#                   (and dyt where this pntrain and reproduce.py have it), seeds 1-6, dropouts
#                   0.3 (the config's own) and 0.2, in REPORT_DIR/results/protocol_lm_long_cuda;
#                   then, once every such cell is done and time is left, --full (the table only)
#                   with seeds 1-3 into results/protocol_lm_full_cuda. --reproduce 'ARGS' runs
#                   those arguments instead (add --norms, --dropouts, --figure5 as on the CPU),
#                   into results/reproduce_lm_<preset>_cuda. Each folder starts from its copy in
#                   the working tree: cells committed from an earlier call are skipped, and a
#                   cell the budget cuts short runs again next time; the report names the
#                   commits the folder's cells were trained at. Commit what comes back under
#                   results/, and keep the one bundle for every call of a protocol.
set -uo pipefail
BUNDLE="" OUT="" ONLY="" BUDGET=570 REPRODUCE=""
COMPARE="gpt2_small_wt2:wikitext-2:layer,power ptb_small:ptb:layer,power"
COMPARE_ARGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --steps) ONLY=",$2,"; shift 2 ;;
    --budget-s) BUDGET="$2"; shift 2 ;;
    --compare) COMPARE="$2"; shift 2 ;;
    --compare-args) COMPARE_ARGS="$2"; shift 2 ;;
    --reproduce) REPRODUCE="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0" | sed '1s/^/Usage: /'; exit 0 ;;  # the comment above
    *) echo "pn gpu-check: unknown argument '$1' (use --bundle DIR --out REPORT_DIR)" >&2; exit 2 ;;
  esac
done
[ -n "$BUNDLE" ] && [ -n "$OUT" ] || { echo "usage: pn gpu-check --bundle DIR --out REPORT_DIR" >&2; exit 2; }
ARCHIVE="$(ls "$BUNDLE"/pn-gpu.tar.xz "$BUNDLE"/pn-gpu.tar.gz 2>/dev/null | head -n 1)"
[ -n "$ARCHIVE" ] || { echo "pn gpu-check: no $BUNDLE/pn-gpu.tar.xz: run 'pn gpu-bundle $BUNDLE' on a machine with the build dependencies" >&2; exit 2; }
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
B="$(mktemp -d)"
CHILD=""
STARTED=$(date -u +%FT%TZ)
# tar reads either compression; Python's tarfile where tar lacks the xz program.
tar -C "$B" -xf "$ARCHIVE" 2>/dev/null ||
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$ARCHIVE" "$B"
export PN_CUDA_REQUIRED=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-8}" PN_SOURCE_DIR="$ROOT"

# The bundled executables' library path: the bundle's lib/, then CUDA's own libraries wherever
# this machine keeps them (the toolkit beside nvcc, the driver's folder, Python's nvidia-*
# packages, where NCCL and cuBLAS may be the only copies), then what was set. Only the bundle's
# programs get it: nvidia-smi and PyTorch keep this machine's libraries.
# shellcheck source=launcher/gpu/bundle_libs.sh
. "$ROOT/launcher/gpu/bundle_libs.sh"
cuda_lib_dirs() {
  local nvcc d
  nvcc=$(command -v nvcc 2>/dev/null) && nvcc=$(readlink -f "$nvcc")
  for d in ${nvcc:+"$(dirname "$nvcc")/../lib64" "$(dirname "$nvcc")/../lib" \
           "$(dirname "$nvcc")/../targets/x86_64-linux/lib"} /usr/local/cuda/lib64 \
           /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    [ -d "$d" ] && readlink -f "$d"
  done
  python3 -c 'import nvidia, sys; print("\n".join(nvidia.__path__))' 2>/dev/null |
    while read -r d; do find "$d" -maxdepth 3 -type d -name lib 2>/dev/null; done
}
PREFERRED=$(bundle_prefer_system "$B")
BLIB="$B/lib$(cuda_lib_dirs | awk '!seen[$0]++ {printf ":%s", $0}')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bundled=(env LD_LIBRARY_PATH="$BLIB")
# compare.py runs pntrain itself: through this wrapper it gets the bundle's library path.
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s/bin/pntrain" "$@"\n' "$BLIB" "$B" > "$B/pntrain"
chmod +x "$B/pntrain"

# ---- the report: report.txt line by line, report.json rewritten whole at every change ------
: > "$OUT/report.txt"
: > "$OUT/steps.jsonl"
RUNNING=""
json_str() {  # a JSON string of $1
  local s
  s=$(printf '%s' "$1" | tr -d '\000-\010\013\014\016-\037')
  s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\t'/\\t}; s=${s//$'\n'/\\n}; s=${s//$'\r'/}
  printf '"%s"' "$s"
}
write_report() {  # write_report FINISHED(true|false)
  local passed=false
  if [ "$1" = true ] && [ -s "$OUT/steps.jsonl" ] &&
     ! grep -qv '"status": "pass"' "$OUT/steps.jsonl"; then
    passed=true
  fi
  {
    printf '{"commit": %s, "host": %s, "started": %s, "budget_s": %s, "seconds": %d,\n' \
      "$(json_str "$(cat "$B/COMMIT" 2>/dev/null)")" "$(json_str "$(hostname)")" \
      "$(json_str "$STARTED")" "$BUDGET" "$SECONDS"
    printf ' "finished": %s, "passed": %s, "running": %s,\n' "$1" "$passed" \
      "$( [ -n "$RUNNING" ] && json_str "$RUNNING" || echo null)"
    printf ' "steps": [%s],\n' "$(paste -sd, "$OUT/steps.jsonl")"
    printf ' "report": %s}\n' "$(json_str "$(cat "$OUT/report.txt")")"
  } > "$OUT/report.json.tmp" && mv -f "$OUT/report.json.tmp" "$OUT/report.json"
}
record() {  # record NAME STATUS RC SECONDS DETAIL
  printf '%-20s %-8s %4ss  %s\n' "$1" "$2" "$4" "$5" | tee -a "$OUT/report.txt"
  printf '{"step": %s, "status": "%s", "rc": %d, "seconds": %d, "detail": %s}\n' \
    "$(json_str "$1")" "$2" "$3" "$4" "$(json_str "$5")" >> "$OUT/steps.jsonl"
  RUNNING=""
  write_report false
}
# Killed (the call's time limit, ^C): the step in flight is recorded as killed, then the report.
on_signal() {
  [ -n "$CHILD" ] && kill -TERM "$CHILD" 2>/dev/null
  [ -n "$RUNNING" ] && record "$RUNNING" killed 143 0 "killed by a signal while running"
  write_report false
  echo "pn gpu-check: killed; the report so far is in $OUT/report.txt" >&2
  exit 143
}
trap on_signal TERM INT HUP
trap 'rm -rf "$B"' EXIT

# The line of a step's log that says why it failed: the runtime's reason where a test or tool
# printed one (PN_CUDA_REQUIRED's skip-turned-failure, an error, a missing file or library),
# else the last line.
log_reason() {
  local line=""
  [ "$2" -ne 0 ] && line=$(grep -m 1 -E 'PN_CUDA_REQUIRED=1: |on every rank|[Ee]rror|not found|No such file|undefined symbol' "$1")
  [ -n "$line" ] || line=$(tail -n 1 "$1")
  printf '%s' "$line" | cut -c1-200
}
# wanted NAME: the step is to run (--steps lists it, or no --steps; the library check always).
wanted() {
  [ -z "$ONLY" ] || [[ "$ONLY" == *",$1,"* ]] || [ "$1" = libraries ] ||
    [[ "$1" == throughput_* && "$ONLY" == *",throughput,"* ]] ||
    [[ "$1" == profile_* && "$ONLY" == *",profile,"* ]] ||
    [[ "$1" == reproduce_* && "$ONLY" == *",reproduce,"* ]]
}
# step NAME LIMIT_S COMMAND...: runs it with a time limit, its output in OUT/NAME.log.
LIBS_GAP=""
step() {
  local name="$1" limit="$2"; shift 2
  local t0=$SECONDS rc
  wanted "$name" || return 0
  if [ -n "$LIBS_GAP" ] && [ "$name" != versions ] && [ "$name" != libraries ]; then
    record "$name" skipped -1 0 "not started: $LIBS_GAP"
    return
  fi
  if [ $((SECONDS + limit)) -gt "$BUDGET" ]; then
    record "$name" skipped -1 0 "not started: it could end past the ${BUDGET} s budget"
    return
  fi
  RUNNING="$name"
  write_report false
  # In the background, so that a signal reaches the trap at once; -k: a process stuck in the
  # driver that ignores TERM is killed 5 s later.
  timeout -k 5 "$limit" "$@" > "$OUT/$name.log" 2>&1 &
  CHILD=$!
  wait "$CHILD"
  rc=$?
  CHILD=""
  local status=pass
  [ $rc -ne 0 ] && status=fail
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && status=timeout
  record "$name" "$status" "$rc" $((SECONDS - t0)) "$(log_reason "$OUT/$name.log" "$rc")"
}

echo "pn gpu-check of commit $(cat "$B/COMMIT") on $(hostname), $STARTED" | tee -a "$OUT/report.txt"
[ -n "$PREFERRED" ] && echo "$PREFERRED" | tee -a "$OUT/report.txt"
# ---- correctness ---------------------------------------------------------------------------
step versions 20 bash -c 'nvcc --version; nvidia-smi && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv'
step libraries 20 env LD_LIBRARY_PATH="$BLIB" "$ROOT/launcher/gpu/bundle_libs.sh" runtime "$B"
if grep -q '^libraries  *fail' "$OUT/report.txt"; then
  LIBS_GAP="libraries: $(tail -n 1 "$OUT/libraries.log")"
fi
step cuda_tests 60 "${bundled[@]}" "$B/bin/pn_cuda_tests" --gtest_output="json:$OUT/cuda_tests.json"
step device_vs_cpu 60 "${bundled[@]}" "$B/bin/pn_tests" --gtest_filter='*cuda*:Devices.*' \
  --gtest_output="json:$OUT/device_vs_cpu.json"
SAN="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
step memcheck 60 "${bundled[@]}" "$SAN" --tool memcheck --error-exitcode 1 "$B/bin/pn_cuda_tests" \
  --gtest_filter='CudaKernels.*:CudaNormKernels.*:CudaNormLayers.*'
step racecheck 60 "${bundled[@]}" "$SAN" --tool racecheck --error-exitcode 1 "$B/bin/pn_cuda_tests" \
  --gtest_filter='CudaKernels.AttentionDecodingStep:CudaKernels.LabelSmoothedCrossEntropy:CudaNormKernels.*'
step memcheck_training 45 "${bundled[@]}" "$SAN" --tool memcheck --error-exitcode 1 "$B/bin/pn_tests" \
  --gtest_filter='Norms/DeviceLm.TrainsAsTheCpu/cuda_batch:Norms/DeviceLm.TrainsAsTheCpu/cuda_power:Devices/DeviceRuns.TranslationTrainsAsTheCpu/cuda'
if [ -x "$B/mpi/bin/mpirun" ] && [ -x "$B/bin/pn_cuda_mpi_tests" ]; then
  export OMPI_MCA_mca_base_component_path="$B/mpi/plugins" OPAL_PKGDATADIR="$B/mpi/share"
  step nccl_2ranks 30 "${bundled[@]}" "$B/mpi/bin/mpirun" --allow-run-as-root --oversubscribe --bind-to none \
    -np 2 -x LD_LIBRARY_PATH "$B/bin/pn_cuda_mpi_tests"
fi
# ---- measurements --------------------------------------------------------------------------
NCU=("$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -n 1)")
if [ -z "${NCU[0]}" ]; then  # the profiling steps then fail with this reason, not env's
  NCU=(bash -c 'echo "no Nsight Compute: ncu is neither on PATH nor in /opt/nvidia/nsight-compute"
                exit 1' ncu)
fi
if [[ "$ONLY" == *",profile,"* ]] && [ -d "$B/wikitext-2" ]; then
  # LN's update (profile_*), then PN's (profile_power_*): where PN's extra time goes.
  for run in profile:layer:150 profile_power:power:75; do
    IFS=: read -r name norm limit <<<"$run"
    step "$name" "$limit" "${bundled[@]}" "${NCU[@]}" \
      --clock-control none --metrics gpu__time_duration.sum --print-kernel-base function --csv \
      --log-file "$OUT/${name}_ncu.csv" \
      "$B/bin/pntrain" --config "$ROOT/configs/gpt2_small_wt2.ini" --data "$B/wikitext-2" \
      --norm "$norm" --device cuda --precision bf16 --dropout 0 --max-update 1 \
      --validate-interval-updates 0
    [ -s "$OUT/${name}_ncu.csv" ] &&
      python3 "$ROOT/launcher/gpu/kernel_times.py" "$OUT/${name}_ncu.csv" \
        > "$OUT/${name}_kernels.txt" &&
      head -n 12 "$OUT/${name}_kernels.txt" >> "$OUT/report.txt"
  done
fi
step norm_bench 40 "${bundled[@]}" "$B/bin/pnbench_norms" --device cuda --dims 512,768,1024 \
  --tokens 16384,65536
if [[ "$ONLY" == *",norm_profile,"* ]]; then
  # Why a norm's kernels fall short of the copy: bandwidth, occupancy and warp stalls of each
  # kernel of LN, BN and PN at d 768, 16K tokens, each figure's calls made once.
  step norm_profile 90 "${bundled[@]}" "${NCU[@]}" --clock-control none \
    --kernel-name regex:'rowgroup|column_pass|column_combine' --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
    --section LaunchStats --print-kernel-base function --log-file "$OUT/norm_profile.txt" \
    "$B/bin/pnbench_norms" --device cuda --dims 768 --tokens 16384 --kinds layer,batch,power \
    --reps 1
fi
step experiments 60 "${bundled[@]}" bash -c 'for x in "$0"/bin/dev_*; do
  echo "== $(basename "$x")"; "$x" || exit 1; done' "$B"
if [ -d "$B/ptb" ]; then
  # name:config:device:precision:graphs:updates:limit
  for run in cuda:ptb_small:cuda:fp32:on:25:25 cuda_nographs:ptb_small:cuda:fp32:off:25:20 \
             cuda_tf32:ptb_small:cuda:tf32:on:25:25 cpu:ptb_small:cpu:fp32:on:25:45 \
             long_cuda:reproduce_long_ptb:cuda:fp32:on:250:20 \
             long_cuda_nographs:reproduce_long_ptb:cuda:fp32:off:250:20; do
    IFS=: read -r name config dev prec graphs updates limit <<<"$run"
    step "throughput_$name" "$limit" "${bundled[@]}" "$B/bin/pntrain" --config "$ROOT/configs/$config.ini" \
      --data "$B/ptb" --device "$dev" --precision "$prec" --cuda-graphs "$graphs" \
      --max-update "$updates" --validate-interval-updates 0 --log-interval 10 \
      --metrics "$OUT/throughput_$name.jsonl"
  done
  grep -h '^pntrain: \(a training micro-step\|CUDA graphs\)' "$OUT"/throughput_*.log 2>/dev/null |
    sort | uniq -c >> "$OUT/report.txt"
  # The summary only where a throughput step ran.
  ls "$OUT"/throughput_*.jsonl > /dev/null 2>&1 &&
  python3 - "$OUT" >> "$OUT/report.txt" <<'PY' || true
import json, statistics, sys
out = sys.argv[1]
def rate(name):  # the median tokens/s of the progress lines after the first fifth
    try:
        rows = [json.loads(l) for l in open(f"{out}/throughput_{name}.jsonl")]
        tps = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r]
        return round(statistics.median(tps[len(tps) // 5:]))
    except Exception:
        return None
def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "n/a"
r = {n: rate(n) for n in ("cuda", "cuda_nographs", "cuda_tf32", "cpu", "long_cuda",
                          "long_cuda_nographs")}
print(f"{'throughput':<20} ptb_small.ini tokens/s (median after the first fifth): "
      f"cuda {r['cuda']} (graphs off {r['cuda_nographs']}, on/off {ratio(r['cuda'], r['cuda_nographs'])}), "
      f"cuda tf32 {r['cuda_tf32']}, cpu {r['cpu']}, cuda/cpu {ratio(r['cuda'], r['cpu'])}")
print(f"{'throughput':<20} reproduce_long_ptb.ini fp32 tokens/s: graphs on {r['long_cuda']}, "
      f"off {r['long_cuda_nographs']}, on/off {ratio(r['long_cuda'], r['long_cuda_nographs'])}")
PY
  left=$((BUDGET - 10 - SECONDS))
  if ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    wanted vs_pytorch && record vs_pytorch skipped -1 0 "no PyTorch with CUDA in python3 here"
  elif [ $left -gt 60 ]; then
    # One compare.py per config, sharing what is left of the budget; each run it cannot fit is
    # named in its table.
    step vs_pytorch $left env COMPARE="$COMPARE" COMPARE_ARGS="$COMPARE_ARGS" ROOT="$ROOT" \
      B="$B" OUT="$OUT" \
      DEADLINE=$(($(date +%s) + left - 10)) bash -c '
      for item in $COMPARE; do
        IFS=: read -r config corpus norms <<<"$item"
        echo "== $config on $corpus: $norms"
        left=$((DEADLINE - $(date +%s)))
        [ $left -gt 30 ] || { echo "(not run: the budget is spent)"; continue; }
        python3 "$ROOT/bench/vs_pytorch/compare.py" --pntrain "$B/pntrain" \
          --configs "$ROOT/configs/$config.ini" --data "$B/$corpus" --norms "$norms" \
          --pntrain-precisions bf16,fp32,bf16-materialized --budget-s $left \
          --out "$OUT/vs_pytorch_$config" $COMPARE_ARGS || exit 1
      done'
    [ -f "$OUT/vs_pytorch.log" ] && grep -E '^(==|GPU:|\|)' "$OUT/vs_pytorch.log" >> "$OUT/report.txt"
    # Which library ran what in pntrain's bf16 runs (each says so once on stderr): cuDNN's
    # attention, the Linear's cuBLASLt epilogues, the micro-step's CUDA graph.
    cat "$OUT"/vs_pytorch_*/pntrain_*bf16*.log 2>/dev/null |
      grep -E '^pntrain: (attention|a Linear|a ReLU|a training micro-step|CUDA graphs)' |
      sort | uniq -c >> "$OUT/report.txt"
  else
    wanted vs_pytorch && record vs_pytorch skipped -1 0 "not started: the ${BUDGET} s budget is spent"
  fi
fi
# ---- the paper's tables on the GPU (only when --steps names reproduce) -----------------------
# reproduce_stage FOLDER ARGS...: reproduce.py ARGS into OUT/FOLDER within what is left of the
# budget; returns 0 when it ran to its end (every cell done), 1 when cut short or failed.
reproduce_stage() {
  local cells="$1" left rc; shift
  mkdir -p "$OUT/$cells"
  [ -d "$ROOT/$cells" ] && cp -r "$ROOT/$cells/." "$OUT/$cells/"
  left=$((BUDGET - 10 - SECONDS))
  if [ $left -lt 60 ]; then
    echo "reproduce_${cells##*_lm_}: not started, $left s of the budget left: the next call" \
         "runs it" | tee -a "$OUT/report.txt"
    return 1
  fi
  # The budget ends reproduce.py with SIGINT (its cell's processes end with it); the cells that
  # finished are kept, so a cut is no failure of the step.
  step "reproduce_${cells##*_lm_}" $left bash -c 'timeout -s INT "$1" "${@:2}"; rc=$?
    [ $rc -eq 124 ] && { echo "the budget is spent: finished cells kept, the rest next call"; exit 0; }
    exit $rc' _ $((left - 15)) python3 "$ROOT/launcher/analysis/reproduce.py" --pntrain "$B/pntrain" \
    --device cuda --out "$OUT/$cells" "$@"
  grep -q "the budget is spent" "$OUT/reproduce_${cells##*_lm_}.log" 2>/dev/null; rc=$?
  # What comes back: the finished cells (evaluated) without their checkpoints; a
  # cell cut short, in training or in its evaluation, goes whole (it starts afresh next call
  # rather than append to its metrics, or look for a best checkpoint, that it no longer has).
  local d
  for d in "$OUT/$cells"/*/*/; do
    [ -f "$d/cmd.txt" ] || continue
    if [ -f "$d/eval.json" ]; then rm -rf "$d/checkpoints"; else rm -rf "$d"; fi
  done
  # The commits the folder's cells trained at (their start records): one, for one table.
  python3 - "$OUT/$cells" >> "$OUT/report.txt" <<'PY'
import collections, glob, json, os, sys
seen = collections.Counter()
for path in glob.glob(os.path.join(sys.argv[1], "*", "*", "metrics.jsonl")):
    commits = {json.loads(l)["provenance"].get("commit", "unknown") for l in open(path)
               if l.startswith('{"event":"start"')}
    for c in commits or {"unknown (no start record)"}:
        seen[c[:12]] += 1
print("%s: cells by commit: %s%s" % (os.path.basename(sys.argv[1]), ", ".join(
    "%s %d" % kv for kv in sorted(seen.items())) or "none yet",
    "  MIXED: the cells span %d commits" % len(seen) if len(seen) > 1 else ""))
PY
  for d in "$OUT/$cells"/*.md; do
    [ -f "$d" ] && grep -E '^\| ' "$d" | head -n 40 >> "$OUT/report.txt"
  done
  [ $rc -ne 0 ] && ! grep -qE "^reproduce_${cells##*_lm_} +(fail|timeout|skipped|killed) " "$OUT/report.txt"
}
if [[ "$ONLY" == *",reproduce,"* ]]; then
  # The preset reads PTB from ../shared/data/ptb beside the tree, on every machine alike (the
  # cells' recorded commands name it so); here it is the bundle's copy.
  # A link left by an earlier call on the same machine points into that call's unpacked bundle,
  # which is gone: replace it (a real folder of the corpus stays).
  if [ ! -e "$ROOT/../shared/data/ptb" ] && [ -d "$B/ptb" ]; then
    mkdir -p "$ROOT/../shared/data" && ln -sfn "$B/ptb" "$ROOT/../shared/data/ptb"
  fi
  if [ -n "$REPRODUCE" ]; then
    preset=$(grep -oE -- '--(quick|medium|long|full)' <<<"$REPRODUCE" | head -n 1)
    # shellcheck disable=SC2086
    reproduce_stage "results/reproduce_lm_${preset#--}_cuda" $REPRODUCE
  else
    norms=layer,batch,power_v,power,power_authors
    # DyT where the bundled pntrain offers --norm dyt and reproduce.py has its row.
    if "$B/pntrain" --help 2>/dev/null | grep -qw dyt &&
       grep -q '"dyt"' "$ROOT/launcher/analysis/reproduce.py"; then norms="$norms,dyt"; fi
    if reproduce_stage results/protocol_lm_long_cuda --long --norms "$norms" \
         --seeds 1,2,3,4,5,6 --dropouts 0.2,0.3; then
      reproduce_stage results/protocol_lm_full_cuda --full --no-ablation --norms "$norms" \
        --seeds 1,2,3
    fi
  fi
fi
write_report true
if grep -qE '^[a-z_0-9]+ +(fail|timeout|skipped|killed) ' "$OUT/report.txt"; then
  echo "pn gpu-check: FAILED (see $OUT/report.txt and the step logs)"; exit 1
fi
echo "pn gpu-check: every step passed ($OUT/report.txt)"
