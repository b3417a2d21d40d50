#!/usr/bin/env bash
# cudnn_frontend.sh [DIR]: the cuDNN frontend's C++ headers (header-only, MIT licence), which
# kernels/cuda/cudnn_sdpa.cpp builds cuDNN's fused attention with, from PyPI's
# nvidia-cudnn-frontend wheel into DIR/include (default .deps/cudnn-frontend, where the CMake
# build looks; CUDNN_FRONTEND_ROOT names another folder). Once: a folder that has the headers
# is kept. PN_CUDNN_FRONTEND_VERSION picks the release (default 1.32.0, the one built here).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEST="${1:-$ROOT/.deps/cudnn-frontend}"
VERSION="${PN_CUDNN_FRONTEND_VERSION:-1.32.0}"
if [ -f "$DEST/include/cudnn_frontend.h" ]; then
  echo "cuDNN frontend: $DEST/include (present)"
  exit 0
fi
python3 -m pip --version >/dev/null 2>&1 || {
  echo "pn cudnn-frontend: python3 has no pip: install python3-pip (apt-get install python3-pip), or put the headers in $DEST/include" >&2
  exit 1
}
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if ! python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" \
     "nvidia-cudnn-frontend==$VERSION" >"$tmp/pip.log" 2>&1; then
  echo "pn cudnn-frontend: pip could not fetch nvidia-cudnn-frontend==$VERSION:" >&2
  tail -n 3 "$tmp/pip.log" >&2
  exit 1
fi
python3 - "$tmp" <<'PY'
import glob, sys, zipfile
tmp = sys.argv[1]
wheel = zipfile.ZipFile(glob.glob(tmp + "/*.whl")[0])
for name in wheel.namelist():
    if name.startswith("include/"):
        wheel.extract(name, tmp + "/x")
PY
mkdir -p "$DEST"
rm -rf "$DEST/include"
mv "$tmp/x/include" "$DEST/include"
echo "cuDNN frontend $VERSION: $DEST/include"
