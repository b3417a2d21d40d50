#!/usr/bin/env python3
"""pntrain against PyTorch on one GPU, side by side in one command.

    bench/vs_pytorch/gpu.py --pntrain build/bin/pntrain [--config configs/ptb_small.ini]
        [--data ../shared/data/ptb] [--norms layer,power,batch] [--updates 20] [--warmup 5]
        [--torch eager,compile] [--precisions fp32,bf16] [--budget-s 0] [--out DIR]

For each norm: pntrain --device cuda (fp32: the precision it trains in today), then the PyTorch
twin (train_torch.py: same model, batch, optimiser, dropout 0) eager and torch.compile'd, in
fp32 and bf16 autocast, on the same data. Prints the median tokens/s of updates W+1..W+N of
each, the ratio pntrain / PyTorch and the model FLOPs utilisation (6N + 6LdT FLOPs per token, as
llm.c counts them, over the GPU's dense bf16 peak), and writes DIR/vs_pytorch.json.
--budget-s stops starting runs that would not finish in time (0: no limit); the runs left out
are listed as such, so a table is never silently short.
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


def median_tps(rows, warmup):
    tps = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r.get("update", 0) > warmup]
    return statistics.median(tps) if tps else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pntrain", required=True)
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "ptb_small.ini"))
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "ptb"))
    ap.add_argument("--norms", default="layer,power,batch")
    ap.add_argument("--torch", default="eager,compile")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--budget-s", type=float, default=0)
    ap.add_argument("--out", default="vs_pytorch_gpu")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: the same table on the CPU (eager fp32 only; a check of the script)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    t_start = time.time()
    cfg = read_ini(a.config)
    total = a.warmup + a.updates
    results, longest = [], 30.0

    def run(tag, cmd):
        """Runs cmd unless the budget would be overrun; its log in OUT/tag.log."""
        nonlocal longest
        left = a.budget_s - (time.time() - t_start) if a.budget_s > 0 else None
        if left is not None and left < longest:
            print("  %-28s not run: the %.0f s budget is spent" % (tag, a.budget_s), flush=True)
            return None, "not run (budget)"
        t0 = time.time()
        with open(os.path.join(a.out, tag + ".log"), "w") as log:
            try:
                rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=left)
            except subprocess.TimeoutExpired:
                rc = "timeout"
        longest = max(longest, time.time() - t0)
        if rc != 0:
            print("  %-28s failed (%s): see %s" % (tag, rc, os.path.join(a.out, tag + ".log")),
                  flush=True)
            return None, "failed"
        return True, "ok"

    for norm in a.norms.split(","):
        metrics = os.path.join(a.out, "pntrain_%s.jsonl" % norm)
        if os.path.exists(metrics):
            os.remove(metrics)
        ok, status = run("pntrain_%s" % norm, [
            a.pntrain, "--config", a.config, "--data", a.data, "--device", a.device, "--norm", norm,
            "--max-update", str(total), "--validate-interval-updates", "0", "--dropout", "0",
            "--log-interval", "5", "--metrics", metrics])
        pn = median_tps([json.loads(l) for l in open(metrics)], a.warmup) if ok else None
        log = open(os.path.join(a.out, "pntrain_%s.log" % norm)).read() if ok else ""
        vocab = next((l.split(": vocabulary ")[1].split(",")[0] for l in log.splitlines()
                      if ": vocabulary " in l), None)
        params = next((int(l.split("total ")[1].split(" parameters")[0])
                       for l in log.splitlines() if "total " in l and " parameters" in l), None)
        row = {"norm": norm, "pntrain_fp32": pn, "pntrain_status": status, "params": params,
               "torch": {}}
        print("%-6s pntrain fp32: %s" % (norm, "%.0f tok/s" % pn if pn else status), flush=True)
        for prec in a.precisions.split(","):
            for mode in a.torch.split(","):
                key = "%s_%s" % (mode, prec)
                cmd = [sys.executable, os.path.join(HERE, "train_torch.py"), "--config", a.config, "--norm", norm,
                       "--data", a.data, "--device", a.device, "--precision", prec, "--dropout",
                       "0", "--updates", str(a.updates), "--warmup", str(a.warmup)]
                cmd += ["--vocab", vocab] if vocab else []
                cmd += ["--compile"] if mode == "compile" else []
                tag = "torch_%s_%s" % (norm, key)
                ok, status = run(tag, cmd)
                tps = None
                if ok:
                    last = open(os.path.join(a.out, tag + ".log")).read().strip().splitlines()[-1]
                    tps = json.loads(last).get("tokens_per_s")
                    row.setdefault("gpu", json.loads(last).get("gpu"))
                    row.setdefault("torch_version", json.loads(last).get("torch"))
                row["torch"][key] = tps if tps else status
                print("%-6s PyTorch %-13s %s" % (norm, key + ":", "%.0f tok/s" % tps if tps
                                                 else status), flush=True)
        results.append(row)

    # The table: pntrain (fp32) over each PyTorch configuration, and MFU.
    gpu = next((r.get("gpu") for r in results if r.get("gpu")), None)
    peak = next((v for k, v in PEAK_BF16.items() if gpu and k in gpu), None)
    L, d, T = (int(cfg.get("decoder-layers", 2)), int(cfg.get("decoder-embed-dim", 128)),
               int(cfg.get("tokens-per-sample", 64)))
    keys = ["%s_%s" % (m, p) for p in a.precisions.split(",") for m in a.torch.split(",")]
    print("\nGPU: %s; PyTorch %s; config %s; %d warm-up + %d measured updates, dropout 0" % (
        gpu or "?", next((r.get("torch_version") for r in results if r.get("torch_version")), "?"),
        os.path.relpath(a.config, ROOT), a.warmup, a.updates))
    head = ["norm", "pntrain fp32"] + ["PyTorch " + k for k in keys] + \
           ["pn / " + k for k in keys] + ["MFU pntrain"]
    print(" | ".join(head))
    for r in results:
        pn = r["pntrain_fp32"]
        cells = [r["norm"], "%.0f" % pn if pn else r["pntrain_status"]]
        for k in keys:
            v = r["torch"].get(k)
            cells.append("%.0f" % v if isinstance(v, float) else str(v))
        for k in keys:
            v = r["torch"].get(k)
            cells.append("%.2f" % (pn / v) if pn and isinstance(v, float) else "n/a")
        flops = (6 * r["params"] + 6 * L * d * T) if r.get("params") else None
        r["mfu_pntrain"] = pn * flops / peak if pn and flops and peak else None
        cells.append("%.1f%%" % (100 * r["mfu_pntrain"]) if r["mfu_pntrain"] else "n/a")
        print(" | ".join(cells))
    json.dump({"gpu": gpu, "config": a.config, "rows": results},
              open(os.path.join(a.out, "vs_pytorch.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
