#!/usr/bin/env python3
"""Runs pnnorm on random masked data and compares it with the PyTorch float64 reference
(norms_ref.py): y, dx, dgamma, dbeta, every running statistic of every rank, and y_eval, to 1e-4
(relative above 1). sync_* layers (and rank-local `power`, `batch`, `power_v`, each rank against
the reference on its own rows) run at 1, 2 and 3 ranks, the per-row layers at 1 rank; the
synchronized layers also at 4 ranks in sync groups of 2 (--sync-group-size; check_sync_groups).

Usage: check_pnnorm.py --pnnorm PATH [--mpirun PATH]. Exits 77 (skipped) when numpy or torch is
missing, 1 on any mismatch.
"""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch  # noqa: F401
except ImportError as e:  # pragma: no cover
    print(f"skipping: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import norms_ref  # noqa: E402

TOL = 1e-4


def make_data(seed, T=5, N=23, d=8):
    rng = np.random.default_rng(seed)
    X = (1.5 * rng.standard_normal((T, N, d)) + 0.5 + rng.standard_normal(d)).astype(np.float32)
    DY = rng.standard_normal((T, N, d)).astype(np.float32)
    M = rng.random((T, N)) > 0.25
    M[1, 7:15] = False  # rank 1's rows at 3 ranks: an empty local statistics batch
    M[2, :] = False     # an iteration with no token at all
    gamma = (1 + 0.3 * rng.standard_normal(d)).astype(np.float32)
    beta = (0.2 * rng.standard_normal(d)).astype(np.float32)
    return X, DY, M, gamma, beta


def save_mask(path, M, dtype):
    np.save(path, M.astype(dtype))


def compare(what, got, want, failures):
    got = np.asarray(got, dtype=np.float64)
    if got.shape != want.shape:
        failures.append(f"{what}: shape {got.shape}, expected {want.shape}")
        return
    err = np.abs(got - want) / np.maximum(1.0, np.abs(want))
    if not np.all(np.isfinite(got)):
        failures.append(f"{what}: non-finite values")
    elif err.max() > TOL:
        i = np.unravel_index(np.argmax(err), err.shape)
        failures.append(f"{what}: max error {err.max():.3g} at {i}: {got[i]} vs {want[i]}")


def check_sync_groups(args, tmp, X, DY, gamma, beta, flag, failures):
    """--sync-group-size at 4 ranks: K = 2 against the reference with each group's statistics
    from its own rows alone (masks, a rank with no token, a whole group with none); K = 1 equal
    to the local twin and K = 4 equal to the run without the flag, bit for bit; K = 3 refused."""
    T, N, d = X.shape
    M = np.random.default_rng(7).random((T, N)) > 0.2
    M[1, 5:11] = False   # rank 1 (rows 5..10 of 23 at 4 ranks) has no token
    M[3, 0:11] = False   # group 0 (ranks 0 and 1) has no token; group 1 has
    np.save(f"{tmp}/m4.npy", M)
    mpi = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "4", "-x",
           "OMP_NUM_THREADS=1"]

    def pnnorm(kind, extra, out, more=()):
        cmd = mpi + [args.pnnorm, "--norm", kind, "--x", f"{tmp}/x.npy", "--dy", f"{tmp}/dy.npy",
                     "--mask", f"{tmp}/m4.npy", "--gamma", f"{tmp}/gamma.npy", "--beta",
                     f"{tmp}/beta.npy", "--out", out] + list(more)
        for k, v in extra.items():
            cmd += [flag[k], str(v)]
        return subprocess.run(cmd, capture_output=True, text=True)

    def files(out):
        found = {}
        for root, _, names in os.walk(out):
            for n in names:
                found[os.path.relpath(os.path.join(root, n), out)] = \
                    open(os.path.join(root, n), "rb").read()
        return found

    configs = [
        ("sync_batch", {"alpha": 0.8}, "batch"),
        ("sync_batch", {"prescale_groups": 2}, "batch"),
        ("sync_power_v", {"alpha": 0.8}, "power_v"),
        ("sync_power", {"warmup": 2, "alpha_fwd": 0.8, "alpha_bkw": 0.7}, "power"),
        ("sync_power", {"warmup": 3, "alpha_fwd": 0.8, "alpha_bkw": 0.7,
                        "pn_variant": "authors"}, "power"),
    ]
    for ci, (kind, extra, twin) in enumerate(configs):
        name = f"{kind} {extra} at 4 ranks in groups of 2"
        out = f"{tmp}/group_{ci}"
        p = pnnorm(kind, extra, out, ["--sync-group-size", "2"])
        if p.returncode != 0:
            failures.append(f"{name}: pnnorm failed ({p.returncode}): {p.stderr[-2000:]}")
            continue
        o = norms_ref.Options(kind, **extra)
        want, want_states = norms_ref.run(o, X.astype(np.float64), DY.astype(np.float64), M,
                                          gamma.astype(np.float64), beta.astype(np.float64),
                                          ranks=4, group_size=2)
        for f in ["y", "dx", "dgamma", "dbeta", "y_eval"]:
            compare(f"{name}: {f}", np.load(f"{out}/{f}.npy"), want[f], failures)
        for r in range(4):
            for sname, sv in want_states[r].items():
                compare(f"{name}: rank {r} {sname}",
                        np.load(f"{out}/state/rank{r}/{sname}.npy"), sv, failures)
        # The two groups saw different rows: their states differ (else the check proves little).
        s0 = np.load(f"{out}/state/rank0/{next(iter(want_states[0]))}.npy")
        s2 = np.load(f"{out}/state/rank2/{next(iter(want_states[0]))}.npy")
        if np.array_equal(s0, s2):
            failures.append(f"{name}: groups 0 and 1 ended with the same state")
        print(f"checked {name}")
        # K = 1 is the local twin, K = 4 the run without the flag: bit for bit.
        for K, other_kind, more, what in [(1, twin, [], f"the local twin {twin}"),
                                          (4, kind, None, "the run without --sync-group-size")]:
            a, b = f"{tmp}/group_{ci}_k{K}", f"{tmp}/group_{ci}_k{K}_ref"
            pa = pnnorm(kind, extra, a, ["--sync-group-size", str(K)])
            pb = pnnorm(other_kind, extra, b, more or [])
            if pa.returncode or pb.returncode:
                failures.append(f"{name}: K={K} runs failed: {pa.stderr[-1000:]} {pb.stderr[-1000:]}")
                continue
            fa, fb = files(a), files(b)
            if fa != fb:
                diff = sorted(k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k))
                failures.append(f"{name}: K={K} differs from {what} in {diff}")
            else:
                print(f"checked {kind} {extra}: K={K} equals {what} bit for bit ({len(fa)} files)")
    p = pnnorm("sync_batch", {}, f"{tmp}/group_bad", ["--sync-group-size", "3"])
    if p.returncode == 0 or "--sync-group-size 3" not in p.stderr or "world size 4" not in p.stderr:
        failures.append(f"--sync-group-size 3 at 4 ranks not refused clearly: rc {p.returncode}, "
                        f"{p.stderr[-1000:]!r}")
    elif os.path.exists(f"{tmp}/group_bad"):
        failures.append("--sync-group-size 3 at 4 ranks wrote output before refusing")
    else:
        print("checked --sync-group-size 3 at 4 ranks is refused: " +
              p.stderr.strip().splitlines()[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pnnorm", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    args = ap.parse_args()

    X, DY, M, gamma, beta = make_data(1)
    T, N, d = X.shape
    configs = [
        ("layer", {}, [1]), ("rms", {}, [1]), ("group", {"groups": 2}, [1]),
        ("group", {"groups": 4}, [1]), ("dyt", {}, [1]), ("dyt", {"dyt_alpha": 0.8}, [1, 2]),
        ("batch", {"alpha": 0.8}, [1, 3]), ("power_v", {"alpha": 0.8}, [1, 3]),
        ("batch", {"prescale_groups": 2}, [1]), ("power_v", {"prescale_groups": 1}, [1]),
        ("power", {"warmup": 2, "alpha_fwd": 0.8, "alpha_bkw": 0.7}, [1, 2, 3]),
        ("sync_batch", {"alpha": 0.8}, [1, 2, 3]),
        ("sync_batch", {"prescale_groups": 2}, [1, 2, 3]),
        ("sync_power_v", {"alpha": 0.8}, [1, 2, 3]),
        ("sync_power_v", {"prescale_groups": 2}, [1, 3]),
        ("sync_power", {"warmup": 2, "alpha_fwd": 0.8, "alpha_bkw": 0.7}, [1, 2, 3]),
        ("power", {"warmup": 3, "alpha_fwd": 0.8, "alpha_bkw": 0.7, "pn_variant": "authors"},
         [1, 2, 3]),
        ("sync_power", {"warmup": 3, "alpha_fwd": 0.8, "alpha_bkw": 0.7,
                        "pn_variant": "authors"}, [1, 2, 3]),
    ]
    flag = {"alpha": "--alpha", "alpha_fwd": "--alpha-fwd", "alpha_bkw": "--alpha-bkw",
            "warmup": "--warmup", "groups": "--groups", "prescale_groups": "--prescale-groups",
            "pn_variant": "--pn-variant", "dyt_alpha": "--dyt-alpha"}
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/x.npy", X)
        np.save(f"{tmp}/dy.npy", DY)
        np.save(f"{tmp}/gamma.npy", gamma)
        np.save(f"{tmp}/beta.npy", beta)
        for ci, (kind, extra, rank_list) in enumerate(configs):
            mask_dtype = [np.bool_, np.uint8, np.float32][ci % 3]
            save_mask(f"{tmp}/m.npy", M, mask_dtype)
            o = norms_ref.Options(kind, **extra)
            for R in rank_list:
                name = f"{kind} {extra} at {R} rank(s)"
                out = f"{tmp}/out_{ci}_{R}"
                cmd = [args.pnnorm, "--norm", kind, "--x", f"{tmp}/x.npy", "--dy",
                       f"{tmp}/dy.npy", "--mask", f"{tmp}/m.npy", "--gamma", f"{tmp}/gamma.npy",
                       "--beta", f"{tmp}/beta.npy", "--out", out]
                for k, v in extra.items():
                    cmd += [flag[k], str(v)]
                if R > 1:
                    cmd = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(R),
                           "-x", "OMP_NUM_THREADS=1"] + cmd
                p = subprocess.run(cmd, capture_output=True, text=True)
                if p.returncode != 0:
                    failures.append(f"{name}: pnnorm failed ({p.returncode}): {p.stderr[-2000:]}")
                    continue
                want, want_states = norms_ref.run(o, X.astype(np.float64), DY.astype(np.float64),
                                                  M, gamma.astype(np.float64),
                                                  beta.astype(np.float64), ranks=R)
                files = ["y", "dx", "dgamma", "y_eval"] + ([] if kind == "rms" else ["dbeta"]) + \
                    (["dalpha"] if kind == "dyt" else [])
                for f in files:
                    compare(f"{name}: {f}", np.load(f"{out}/{f}.npy"), want[f], failures)
                if kind == "rms" and os.path.exists(f"{out}/dbeta.npy"):
                    failures.append(f"{name}: rms wrote dbeta.npy")
                for r in range(R):
                    for sname, sv in want_states[r].items():
                        path = f"{out}/state/rank{r}/{sname}.npy"
                        if not os.path.exists(path):
                            failures.append(f"{name}: missing {path}")
                            continue
                        compare(f"{name}: rank {r} {sname}", np.load(path), sv, failures)
                print(f"checked {name}")
        check_sync_groups(args, tmp, X, DY, gamma, beta, flag, failures)
        # Bad input is rejected with a message naming the file.
        np.save(f"{tmp}/x64.npy", X.astype(np.float64))
        p = subprocess.run([args.pnnorm, "--norm", "batch", "--x", f"{tmp}/x64.npy", "--dy",
                            f"{tmp}/dy.npy", "--out", f"{tmp}/bad"], capture_output=True,
                           text=True)
        if p.returncode == 0 or "x64.npy" not in p.stderr or "float32" not in p.stderr:
            failures.append(f"float64 X not rejected clearly: rc {p.returncode}, {p.stderr!r}")
        np.save(f"{tmp}/xf.npy", np.asfortranarray(X))
        p = subprocess.run([args.pnnorm, "--norm", "batch", "--x", f"{tmp}/xf.npy", "--dy",
                            f"{tmp}/dy.npy", "--out", f"{tmp}/bad"], capture_output=True,
                           text=True)
        if p.returncode == 0 or "Fortran" not in p.stderr:
            failures.append(f"Fortran-order X not rejected clearly: {p.stderr!r}")
    for f in failures:
        print("FAIL", f)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
