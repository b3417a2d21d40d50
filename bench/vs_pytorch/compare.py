#!/usr/bin/env python3
"""pntrain against its PyTorch twin, side by side in one command, on the CPU or one GPU.

    bench/vs_pytorch/compare.py --pntrain build/bin/pntrain [--device cpu|cuda]
        [--configs configs/ptb_small.ini,...] [--data ../shared/data/ptb] [--norms layer,power]
        [--ranks 1,2] [--torch eager,compile] [--precisions fp32,bf16] [--repeats 3]
        [--updates 20] [--warmup 5] [--python PY] [--budget-s 0] [--out DIR]

For each config, norm and rank count (CPU: ranks x cores/ranks threads; GPU: one rank): pntrain
(fp32, the precision it trains in on both devices), then the PyTorch twin (train_torch.py: the
same model, batch, optimiser and data, dropout 0; DDP over gloo at several ranks) eager and
torch.compile'd, in fp32 and in bf16 autocast. Each cell is the median tokens/s of updates
W+1..W+N of one run; with --repeats K every run is repeated K times (the repeats interleaved, so
a drift of the machine spreads over all columns) and the table gives the median of the K
figures with their range. Also: the peak RSS of rank 0, pntrain / PyTorch for each column, and
on a GPU pntrain's model FLOPs utilisation (6N + 6LdT FLOPs per token, as llm.c counts them,
over the GPU's dense bf16 peak). Writes DIR/compare.json and DIR/table.md. --python is the
interpreter with the PyTorch to compare with (bench/vs_pytorch/cpu.sh makes one with PyPI's);
--budget-s stops starting runs that would not finish in time (0: no limit), and the runs left
out are named in the table, so that it is never silently short.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from train_torch import read_ini  # noqa: E402

# Dense bf16 tensor-core peak (FLOP/s) of the GPUs this is run on (SXM parts).
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


def median_tps(path, warmup):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    tps = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r.get("update", 0) > warmup]
    rss = [r["peak_rss_mb"] for r in rows if "peak_rss_mb" in r]
    return (statistics.median(tps) if tps else None), (max(rss) if rss else None)


def spread(xs):
    """'median (min-max)' of the repeats' figures, or what stopped them."""
    nums = [x for x in xs if isinstance(x, (int, float))]
    if not nums:
        return xs[0] if xs else "not run"
    if len(nums) == 1:
        return "%.0f" % nums[0]
    return "%.0f (%.0f-%.0f)" % (statistics.median(nums), min(nums), max(nums))


def ratio(pn, pt):
    a = [x for x in pn if isinstance(x, (int, float))]
    b = [x for x in pt if isinstance(x, (int, float))]
    if not a or not b:
        return "n/a"
    r = statistics.median(a) / statistics.median(b)
    if len(a) == len(b) and len(a) > 1:  # the range over repeats, run k against run k
        rs = [x / y for x, y in zip(a, b)]
        return "%.2f (%.2f-%.2f)" % (r, min(rs), max(rs))
    return "%.2f" % r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pntrain", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--configs", "--config", default=os.path.join(ROOT, "configs", "ptb_small.ini"),
                    help="comma-separated pntrain INI configs")
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "ptb"))
    ap.add_argument("--norms", default="layer,power,batch")
    ap.add_argument("--ranks", default="1", help="rank counts (CPU; a GPU runs one rank)")
    ap.add_argument("--torch", default="eager,compile")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--python", default=sys.executable, help="the interpreter with PyTorch")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--budget-s", type=float, default=0)
    ap.add_argument("--out", default="vs_pytorch")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    t_start = time.time()
    total = a.warmup + a.updates
    cores = len(os.sched_getaffinity(0))
    ranks = [1] if a.device == "cuda" else [int(r) for r in a.ranks.split(",")]
    keys = ["%s_%s" % (m, p) for p in a.precisions.split(",") for m in a.torch.split(",")]
    longest = 30.0

    def run(tag, cmd, env=None):
        """Runs cmd unless the budget would be overrun; its output in OUT/tag.log."""
        nonlocal longest
        left = a.budget_s - (time.time() - t_start) if a.budget_s > 0 else None
        if left is not None and left < longest:
            print("  %-36s not run: the %.0f s budget is spent" % (tag, a.budget_s), flush=True)
            return "not run (budget)"
        t0 = time.time()
        with open(os.path.join(a.out, tag + ".log"), "w") as log:
            try:
                rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=left,
                                     env=dict(os.environ, **(env or {})))
            except subprocess.TimeoutExpired:
                rc = "timeout"
        longest = max(longest, time.time() - t0)
        if rc != 0:
            print("  %-36s failed (%s): see %s" % (tag, rc, os.path.join(a.out, tag + ".log")),
                  flush=True)
            return "failed"
        return "ok"

    rows = []
    for config in a.configs.split(","):
        cfg = read_ini(config)
        cname = os.path.splitext(os.path.basename(config))[0]
        for norm in a.norms.split(","):
            for R in ranks:
                threads = max(1, cores // R)
                row = {"config": cname, "norm": norm, "ranks": R, "threads": threads,
                       "shape": [int(cfg.get(k, v)) for k, v in (("decoder-layers", 2),
                                                                 ("decoder-embed-dim", 128),
                                                                 ("tokens-per-sample", 64))],
                       "pntrain_fp32": [], "pntrain_rss_mb": [], "torch": {k: [] for k in keys},
                       "torch_rss_mb": {k: [] for k in keys}}
                for rep in range(a.repeats):
                    tag = "%s_%s_r%d_%d" % (cname, norm, R, rep + 1)
                    metrics = os.path.join(a.out, "pntrain_%s.jsonl" % tag)
                    if os.path.exists(metrics):
                        os.remove(metrics)
                    cmd = [a.pntrain, "--config", config, "--data", a.data, "--device", a.device,
                           "--norm", norm, "--max-update", str(total), "--validate-interval-updates",
                           "0", "--dropout", "0", "--log-interval", "5", "--metrics", metrics]
                    if a.device == "cpu":
                        mpi = [a.mpirun, "--bind-to", "none", "-np", str(R)]
                        mpi += ["--allow-run-as-root"] if os.geteuid() == 0 else []
                        mpi += ["--oversubscribe"] if R > cores else []
                        cmd = mpi + cmd + ["--threads", str(threads)]
                    status = run("pntrain_" + tag, cmd)
                    pn, rss = median_tps(metrics, a.warmup) if status == "ok" else (status, None)
                    row["pntrain_fp32"].append(pn)
                    row["pntrain_rss_mb"].append(rss)
                    log = open(os.path.join(a.out, "pntrain_%s.log" % tag)).read() \
                        if status == "ok" else ""
                    vocab = next((l.split(": vocabulary ")[1].split(",")[0]
                                  for l in log.splitlines() if ": vocabulary " in l), None)
                    row.setdefault("params", next((int(l.split("total ")[1].split(" parameters")[0])
                                                   for l in log.splitlines()
                                                   if "total " in l and " parameters" in l), None))
                    print("%s %-6s %d rank(s) #%d pntrain fp32: %s" % (
                        cname, norm, R, rep + 1, "%.0f tok/s" % pn if status == "ok" else status),
                        flush=True)
                    for key in keys:
                        mode, prec = key.split("_")
                        cmd = [a.python, os.path.join(HERE, "train_torch.py"), "--config", config,
                               "--norm", norm, "--data", a.data, "--device", a.device,
                               "--precision", prec, "--dropout", "0", "--updates", str(a.updates),
                               "--warmup", str(a.warmup), "--ranks", str(R), "--threads",
                               str(threads)]
                        cmd += ["--vocab", vocab] if vocab else []
                        cmd += ["--compile"] if mode == "compile" else []
                        ttag = "torch_%s_%s" % (tag, key)
                        status = run(ttag, cmd, {"OMP_NUM_THREADS": str(threads)})
                        tps, trss = status, None
                        if status == "ok":
                            last = json.loads(open(os.path.join(a.out, ttag + ".log")).read()
                                              .strip().splitlines()[-1])
                            tps, trss = last.get("tokens_per_s"), max(last.get("peak_rss_mb", [0]))
                            row.setdefault("gpu", last.get("gpu"))
                            row.setdefault("torch_version", last.get("torch"))
                        row["torch"][key].append(tps)
                        row["torch_rss_mb"][key].append(trss)
                        print("%s %-6s %d rank(s) #%d PyTorch %-13s %s" % (
                            cname, norm, R, rep + 1, key + ":",
                            "%.0f tok/s" % tps if isinstance(tps, float) else tps), flush=True)
                rows.append(row)
                json.dump({"device": a.device, "rows": rows},
                          open(os.path.join(a.out, "compare.json"), "w"), indent=1)

    # The table: pntrain (fp32) against each PyTorch configuration.
    gpu = next((r.get("gpu") for r in rows if r.get("gpu")), None)
    peak = next((v for k, v in PEAK_BF16.items() if gpu and k in gpu), None)
    version = next((r.get("torch_version") for r in rows if r.get("torch_version")), "?")
    if a.device == "cuda":
        where = "GPU: %s" % (gpu or "?")
    else:
        model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                      if l.startswith("model name")), "?")
        where = "CPU: %s, %d cores" % (model, cores)
    lines = ["%s; PyTorch %s (%s); %d warm-up + %d measured updates, dropout 0; tokens/s, "
             "median of %d run(s) (range)" % (where, version, a.python, a.warmup, a.updates,
                                             a.repeats), ""]
    head = ["config", "norm", "ranks x threads", "pntrain fp32"] + ["PyTorch " + k for k in keys] \
        + ["pn / " + k for k in keys] + ["RSS MB pntrain / PyTorch (least)"] \
        + (["MFU pntrain"] if a.device == "cuda" else [])
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["config"], r["norm"], "%d x %d" % (r["ranks"], r["threads"]),
                 spread(r["pntrain_fp32"])]
        cells += [spread(r["torch"][k]) for k in keys]
        cells += [ratio(r["pntrain_fp32"], r["torch"][k]) for k in keys]
        prss = [x for x in r["pntrain_rss_mb"] if x]
        trss = [x for k in keys for x in r["torch_rss_mb"][k] if x]
        cells.append("%.0f / %.0f" % (max(prss), min(trss)) if prss and trss else "n/a")
        if a.device == "cuda":
            L, d, T = r["shape"]
            pn = [x for x in r["pntrain_fp32"] if isinstance(x, (int, float))]
            flops = (6 * r["params"] + 6 * L * d * T) if r.get("params") else None
            r["mfu_pntrain"] = statistics.median(pn) * flops / peak if pn and flops and peak \
                else None
            cells.append("%.1f%%" % (100 * r["mfu_pntrain"]) if r["mfu_pntrain"] else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    print("\n" + "\n".join(lines))
    open(os.path.join(a.out, "table.md"), "w").write("\n".join(lines) + "\n")
    json.dump({"device": a.device, "where": where, "torch": version, "rows": rows},
              open(os.path.join(a.out, "compare.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
