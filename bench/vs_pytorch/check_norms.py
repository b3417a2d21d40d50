#!/usr/bin/python3
"""Checks model.py's batch and power norms against pntrain's pnnorm (docs/contract.md §7).

    /usr/bin/python3 bench/vs_pytorch/check_norms.py [BUILD_DIR]     # default build-vs

Runs T = 5 training iterations (PN warmup 2, so both PN regimes) of N = 64 rows, d = 16 through
pnnorm and through PowerNorm / TokenBatchNorm, and prints the largest relative difference of
y, dx, dgamma, dbeta, every running statistic and the inference output. Expected: float
rounding (~1e-7) everywhere except batch's running_var and y_eval, where nn.BatchNorm1d keeps
the unbiased variance (factor N/(N-1)) and pntrain the biased one (docs/contract.md §2).
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from model import PowerNorm, TokenBatchNorm  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "build-vs")
pnnorm = os.path.join(build, "bin", "pnnorm")
if not os.access(pnnorm, os.X_OK):
    sys.exit(f"{pnnorm} not found: make -C {build} pnnorm")
rng = np.random.default_rng(0)
T, N, d, W = 5, 64, 16, 2
X = (rng.standard_normal((T, N, d)) * 2 + 0.5).astype(np.float32)
DY = rng.standard_normal((T, N, d)).astype(np.float32)
G = (1 + 0.3 * rng.standard_normal(d)).astype(np.float32)
B = (0.1 * rng.standard_normal(d)).astype(np.float32)
tmp = tempfile.mkdtemp(prefix="pn_check_norms.")
for name, v in [("x", X), ("dy", DY), ("g", G), ("b", B)]:
    np.save(os.path.join(tmp, name + ".npy"), v)
for kind, states in [("power", ["running_psi2", "nu"]), ("batch", ["running_mean", "running_var"])]:
    out = os.path.join(tmp, kind)
    subprocess.run([pnnorm, "--norm", kind, "--x", f"{tmp}/x.npy", "--dy", f"{tmp}/dy.npy",
                    "--gamma", f"{tmp}/g.npy", "--beta", f"{tmp}/b.npy", "--warmup", str(W),
                    "--out", out], check=True, capture_output=True)
    m = PowerNorm(d, warmup=W) if kind == "power" else TokenBatchNorm(d)
    inner = m if kind == "power" else m.bn
    with torch.no_grad():
        inner.weight.copy_(torch.from_numpy(G))
        inner.bias.copy_(torch.from_numpy(B))
    err = {}

    def cmp(name, mine, ref):
        e = float(np.abs(mine - ref).max() / (np.abs(ref).max() + 1e-12))
        err[name] = max(err.get(name, 0.0), e)

    for t in range(T):
        x = torch.from_numpy(X[t]).requires_grad_()
        inner.weight.grad = inner.bias.grad = None
        y = m(x)
        y.backward(torch.from_numpy(DY[t]))
        for name, mine in [("y", y.detach()), ("dx", x.grad), ("dgamma", inner.weight.grad),
                           ("dbeta", inner.bias.grad)]:
            cmp(name, mine.numpy(), np.load(f"{out}/{name}.npy")[t])
        for name in states:
            cmp(name, getattr(inner, name).numpy(), np.load(f"{out}/state/rank0/{name}.npy")[t])
    m.eval()
    cmp("y_eval", m(torch.from_numpy(X[-1])).detach().numpy(), np.load(f"{out}/y_eval.npy"))
    print(kind.ljust(6), "  ".join(f"{k} {v:.1e}" for k, v in err.items()))
