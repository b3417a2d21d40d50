#!/usr/bin/env bash
# pn gpu-bundle DIR: everything a GPU machine that has CUDA, cuBLAS, NCCL and a driver (but no
# MPI, Boost, glog, GoogleTest or OpenBLAS) needs to run `pn gpu-check` in one call.
#
# DIR/pn-gpu.tar.xz holds the CUDA build's executables (sm_80 and sm_90 by default) and every
# shared library they load that is neither the C library nor part of the CUDA toolkit (which the
# GPU machine brings), plus MPI's launcher and plug-ins when present, so that a 2-rank run can
# come along. Measured: 28 MB as .tar.xz (sm_80 and sm_90, with MPI, oneDNN, PTB and WikiText-2;
# 48 MB as .tar.gz, which with the working tree passed the 64 MiB a GPU call carries). Usage: launcher/gpu/gpu_bundle.sh BUILD_DIR DIR
set -euo pipefail
case "${1:-}" in
  -h|--help|"") sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0" | sed '1s/^/Usage: /'; [ -n "${1:-}" ]; exit ;;
esac
BUILD="$1"
[ $# -eq 2 ] || { echo "usage: launcher/gpu/gpu_bundle.sh BUILD_DIR DIR" >&2; exit 2; }
OUT="$2"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib" "$OUT"

bins=("$BUILD/bin/pntrain" "$BUILD/bin/pnbench_norms" "$BUILD/tests/pn_tests"
      "$BUILD/tests/cuda/pn_cuda_tests")
[ -x "$BUILD/tests/cuda/pn_cuda_mpi_tests" ] && bins+=("$BUILD/tests/cuda/pn_cuda_mpi_tests")
[ -x "$BUILD/tests/pn_mpi_tests" ] && bins+=("$BUILD/tests/pn_mpi_tests")
for x in "$BUILD"/bin/dev_*; do [ -x "$x" ] && bins+=("$x"); done  # the kernel experiments
for b in "${bins[@]}"; do
  [ -x "$b" ] || { echo "pn gpu-bundle: $b is missing: build with CUDA first (PN_CUDA=ON)" >&2; exit 2; }
  grep -q "cudaLaunchKernel\|__cudaRegisterFatBinary" "$b" ||
    { echo "pn gpu-bundle: $b has no CUDA code: rebuild with PN_CUDA=ON" >&2; exit 2; }
  cp "$b" "$STAGE/bin/"
done

# Every library the executables load, except the C library's own and the CUDA toolkit's.
for b in "${bins[@]}"; do ldd "$b"; done | awk '/=> \//{print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libcuda|libcudart|libcublas[^/]*|libnccl)\.so' |
  while read -r lib; do cp -L "$lib" "$STAGE/lib/"; done

# Open MPI's launcher and plug-ins, for the 2-rank staged check (optional).
if command -v mpirun >/dev/null; then
  mkdir -p "$STAGE/mpi/bin"
  cp -L "$(command -v orterun 2>/dev/null || command -v mpirun)" "$STAGE/mpi/bin/mpirun"
  for plug in /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3 /usr/lib/x86_64-linux-gnu/openmpi/lib; do
    [ -d "$plug" ] && { mkdir -p "$STAGE/mpi/plugins"; cp -L "$plug"/*.so "$STAGE/mpi/plugins/" 2>/dev/null || true; }
  done
  [ -d /usr/share/openmpi ] && cp -rL /usr/share/openmpi "$STAGE/mpi/share"
  # The plug-ins' own libraries (hwloc, event, pmix, ...), as for the executables.
  for p in "$STAGE"/mpi/plugins/*.so "$STAGE/mpi/bin/mpirun"; do ldd "$p" 2>/dev/null; done |
    awk '/=> \//{print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libcuda|libcudart|libcublas[^/]*|libnccl)\.so' |
    while read -r lib; do [ -e "$STAGE/lib/$(basename "$lib")" ] || cp -L "$lib" "$STAGE/lib/"; done
fi

# The bundle must run where only the C library and CUDA are: every NEEDED entry of every ELF
# file resolves in lib/ or in those two sets (launcher/gpu/bundle_libs.sh). An MPI plug-in whose
# library is missing here too is left out (Open MPI skips a plug-in it cannot open); any other
# gap refuses the bundle, naming the library.
# shellcheck source=launcher/gpu/bundle_libs.sh
. "$ROOT/launcher/gpu/bundle_libs.sh"
if ! gaps=$(bundle_check "$STAGE"); then
  while read -r lib _ _ file; do
    file="${file%)}"
    if [[ "$file" == mpi/plugins/* ]]; then
      echo "pn gpu-bundle: leaving out the MPI plug-in ${file#mpi/plugins/} (it needs $lib, which this machine lacks too)" >&2
      rm -f "$STAGE/$file"
    fi
  done <<<"$gaps"
  if ! gaps=$(bundle_check "$STAGE"); then
    echo "pn gpu-bundle: refused: the bundle lacks $(head -n 1 <<<"$gaps")" >&2
    [ "$(wc -l <<<"$gaps")" -gt 1 ] && echo "and $(($(wc -l <<<"$gaps") - 1)) more:" >&2 && tail -n +2 <<<"$gaps" >&2
    exit 1
  fi
fi
# The C library the bundle needs at least (the GPU machine's is newer, which is fine).
bundle_glibc "$STAGE" > "$STAGE/GLIBC"

# The corpora of the tokens/s comparisons (PTB, WikiText-2), when they are beside the repository.
for corpus in ptb wikitext-2; do
  [ -d "$ROOT/../shared/data/$corpus" ] && cp -r "$ROOT/../shared/data/$corpus" "$STAGE/$corpus"
done
git -C "$ROOT" rev-parse HEAD > "$STAGE/COMMIT" 2>/dev/null || echo unknown > "$STAGE/COMMIT"
rm -f "$OUT/pn-gpu.tar.gz"  # an older bundle's
tar -C "$STAGE" -cf - . | xz -6 -T0 > "$OUT/pn-gpu.tar.xz"
echo "pn gpu-bundle: $OUT/pn-gpu.tar.xz ($(du -h "$OUT/pn-gpu.tar.xz" | cut -f1); every library" \
     "resolves in it, the C library ($(cat "$STAGE/GLIBC") or newer) or CUDA); on the GPU" \
     "machine: launcher/pn gpu-check --bundle $OUT --out REPORT_DIR"
