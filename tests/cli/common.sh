# The start the command-line tests share (sourced): PNTRAIN and the mpirun command from the
# arguments, a python3 (Debian's where there is one), a temporary directory to work in, removed
# at exit, and fail(), which counts what failed.
set -u
pntrain="$1"; shift
mpirun=("$@")
py=/usr/bin/python3; [ -x "$py" ] || py=python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures+1)); }
