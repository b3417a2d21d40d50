#!/usr/bin/env bash
# pntrain against today's PyTorch on the CPU, side by side in one command:
#
#   bench/vs_pytorch/cpu.sh [compare.py's options]      # e.g. --norms layer --repeats 3
#
# On first use it makes a virtual environment of the project's own, .venv-torch/ (ignored by
# git), with PyTorch 2.x and numpy from PyPI (about 4 GB with the CUDA libraries PyPI's wheel
# depends on; set PN_TORCH_SPEC, default 'torch>=2.5', to choose another). The tests never use
# it: they keep Debian's python3-torch. Then compare.py --device cpu with these defaults:
# configs/ptb_small.ini and configs/ptb_wide.ini on PTB, norms layer and power, 1 rank x 2 threads
# and 2 ranks x 1 thread (PyTorch with DDP over gloo), eager and torch.compile, fp32 and bf16
# autocast, 3 repeats, the output in bench-results/vs_pytorch_cpu/. The translation model:
# --configs configs/iwslt_small.ini (its own corpus and per-site norms; add --check to train the
# twin from pntrain's initial parameters and compare the losses).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${PN_TORCH_VENV:-$ROOT/.venv-torch}"
PNTRAIN="${PNTRAIN:-$ROOT/build/bin/pntrain}"
[ -x "$PNTRAIN" ] || { echo "cpu.sh: $PNTRAIN not found: build first (launcher/pn build)" >&2; exit 1; }
if ! "$VENV/bin/python" -c 'import torch, numpy; assert int(torch.__version__.split(".")[0]) >= 2' 2>/dev/null; then
  echo "cpu.sh: making $VENV with ${PN_TORCH_SPEC:-torch>=2.5} from PyPI (first use only)" >&2
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q "${PN_TORCH_SPEC:-torch>=2.5}" numpy
fi
exec "$VENV/bin/python" "$ROOT/bench/vs_pytorch/compare.py" --device cpu --pntrain "$PNTRAIN" \
  --python "$VENV/bin/python" --configs "$ROOT/configs/ptb_small.ini,$ROOT/configs/ptb_wide.ini" \
  --data "$ROOT/../shared/data/ptb" --norms layer,power --ranks 1,2 --repeats 3 \
  --out "$ROOT/bench-results/vs_pytorch_cpu" "$@"
