#!/usr/bin/env bash
# The shared libraries of the GPU bundle (launcher/gpu/gpu_bundle.sh packs it, gpu_check.sh runs it).
#
# The GPU machine runs another distribution: it brings the C library (a newer one) and CUDA
# (driver, runtime, cuBLAS, NCCL; in the toolkit's folder or in Python's nvidia-* packages), and
# nothing else pntrain links. So every library the bundled executables need must be in the
# bundle's lib/ or in one of those two sets. Sourced for its functions, or run:
#   bundle_libs.sh check STAGE      every NEEDED entry of every ELF file of STAGE resolves in
#                                   STAGE/lib, the C library or CUDA (no loader involved: this
#                                   machine's own libraries cannot hide a gap); prints each gap
#                                   as "LIB (needed by FILE)" and exits 1
#   bundle_libs.sh glibc STAGE      the newest GLIBC_ version any ELF file of STAGE asks for
#   bundle_libs.sh runtime BUNDLE   under the current LD_LIBRARY_PATH, the first library or
#                                   symbol the loader cannot find for BUNDLE's executables, in one
#                                   line (ldd -r), exit 1; "ok" and exit 0 when there is none
#   bundle_libs.sh prefer-system BUNDLE
#                                   drop BUNDLE's GCC runtime libraries where this machine's own
#                                   copies define every version they do
set -uo pipefail

# Names the GPU machine provides itself: the C library's own objects and CUDA's.
bundle_provided_lib() {
  [[ "$1" =~ ^(libc|libm|libdl|libpthread|librt|libutil|libresolv|libanl)\.so\.[0-9]+$ ||
     "$1" =~ ^ld-linux-x86-64\.so\.2$ ||
     "$1" =~ ^lib(cuda|cudart|cublas|cublasLt|nccl|nvidia-ml)\.so(\.[0-9]+)*$ ]]
}

# The ELF files of a bundle folder (executables, libraries, MPI's launcher and plug-ins).
bundle_elf_files() {
  local f
  for f in "$1"/bin/* "$1"/lib/* "$1"/mpi/bin/* "$1"/mpi/plugins/*; do
    [ -f "$f" ] && [ "$(head -c 4 "$f" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ] &&
      echo "$f"
  done
}

# Prints "LIB (needed by FILE)" for each NEEDED entry found neither in STAGE/lib nor among the
# provided names; returns 1 when there is one.
bundle_check() {
  local stage="$1" f lib gaps=0
  while read -r f; do
    while read -r lib; do
      [ -n "$lib" ] || continue
      bundle_provided_lib "$lib" && continue
      [ -e "$stage/lib/$lib" ] && continue
      echo "$lib (needed by ${f#"$stage"/})"
      gaps=1
    done < <(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  done < <(bundle_elf_files "$stage")
  return $gaps
}

# The newest GLIBC_x.y symbol version that any ELF file of the folder requires.
bundle_glibc() {
  bundle_elf_files "$1" | while read -r f; do objdump -T "$f" 2>/dev/null; done |
    grep -o 'GLIBC_[0-9][0-9.]*' | sort -uV | tail -n 1
}

# The version names (GLIBCXX_3.4.30, GCC_12.0.0, ...) that a shared library defines.
defined_versions() {
  readelf -V "$1" 2>/dev/null | sed -n '/\.gnu\.version_d/,/\.gnu\.version_r/p' |
    grep -o 'Name: [A-Za-z_][A-Za-z0-9_.]*' | cut -d' ' -f2 | sort -u
}

# The GCC runtime (libstdc++, libgcc_s, libgomp) came along from the build machine; where this
# machine has its own copy that defines every version ours does, ours is removed: the newer
# copy serves both, and tools of this machine (compute-sanitizer, PyTorch) that need the newer
# one keep working beside the bundle.
bundle_prefer_system() {
  local b="$1" lib sys
  for lib in libstdc++.so.6 libgcc_s.so.1 libgomp.so.1; do
    [ -e "$b/lib/$lib" ] || continue
    sys=$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l && /x86-64/ {print $NF; exit}')
    [ -n "$sys" ] && [ -e "$sys" ] || continue
    if [ -z "$(comm -23 <(defined_versions "$b/lib/$lib") <(defined_versions "$sys"))" ]; then
      rm -f "$b/lib/$lib"
      echo "using this machine's $sys (it has every version of the bundled $lib)"
    fi
  done
}

# One line: the first "not found" library or "undefined symbol" of the bundle's executables
# under the current LD_LIBRARY_PATH (ldd -r relocates everything, as a run would). A C library
# older than the one the bundle was built against is named first (a newer one is fine: glibc
# keeps every old symbol version).
bundle_runtime() {
  local b="$1" f out line need have
  if [ -s "$b/GLIBC" ]; then
    need=$(sed 's/^GLIBC_//' "$b/GLIBC")
    have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
    if [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n 1)" != "$need" ]; then
      echo "the bundle needs GLIBC_$need and this machine's C library is $have: pack it on a distribution as old as this one"
      return 1
    fi
  fi
  for f in "$b"/bin/* "$b"/mpi/bin/*; do
    [ -f "$f" ] && [ -x "$f" ] || continue
    out=$(ldd -r "$f" 2>&1)
    line=$(grep -m 1 -E 'not found|undefined symbol|version .* not found' <<<"$out")
    if [ -n "$line" ]; then
      line=$(sed -E 's/^[[:space:]]+//; s/[[:space:]]+\(.*\)$//' <<<"$line")
      echo "${f#"$b"/}: $line"
      return 1
    fi
  done
  echo "ok: every library and symbol of $(ls "$b"/bin | wc -l) executables resolves"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
    check) bundle_check "$2" ;;
    glibc) bundle_glibc "$2" ;;
    runtime) bundle_runtime "$2" ;;
    prefer-system) bundle_prefer_system "$2" ;;
    *) sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; [ "${1:-}" = --help ] || [ "${1:-}" = -h ] ;;
  esac
fi
