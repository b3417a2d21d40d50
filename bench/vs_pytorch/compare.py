#!/usr/bin/env python3
"""pntrain against its PyTorch twin, side by side in one command, on the CPU or one GPU.

    bench/vs_pytorch/compare.py --pntrain build/bin/pntrain [--device cpu|cuda]
        [--configs configs/ptb_small.ini,configs/iwslt_small.ini,...] [--data ../shared/data/ptb]
        [--norms layer,power] [--ranks 1,2] [--torch eager,compile,plain-eager,plain-compile]
        [--precisions fp32,bf16]
        [--pntrain-precisions fp32,bf16] [--repeats 3] [--updates 20] [--warmup 5] [--python PY] [--budget-s 0] [--check]
        [--out DIR]

For each config, norm and rank count (CPU: ranks x cores/ranks threads; GPU: one rank): pntrain
in each of --pntrain-precisions (default fp32; on a GPU also bf16: its GEMMs on bf16 tensor
cores, fp32 storage and norms), then the PyTorch twin (train_torch.py: the same model, batch,
optimiser and data, dropout 0; DDP over gloo at several ranks) eager and torch.compile'd, in
fp32 and in bf16 autocast, and, for a language model at one rank, the plain PyTorch model of
the same shape (plain_gpt.py: nn.LayerNorm, scaled_dot_product_attention, F.cross_entropy,
fused AdamW, random tokens; --torch plain-eager,plain-compile, on by default on a GPU, off on
the CPU), run once per config and repeat and shared by the rows of its norms: its tokens/s,
pntrain / plain, and twin / plain mode for mode (eager / plain-eager, compile / plain-compile),
which says whether the twin is itself slower than PyTorch written for speed. Each cell is the
median tokens/s of updates W+1..W+N of one run; with --repeats K every run is repeated K times
(the repeats interleaved, so a drift of the machine spreads over all columns) and the table
gives the median of the K figures with their range. Also: pntrain / PyTorch for each column
(pntrain in the column's precision where it ran, else in fp32), the peak RSS of rank 0 and on a
GPU the peak GPU memory (pntrain's CUDA pool high-water mark, PyTorch's max_memory_allocated) of
pntrain / the twin [/ the plain model], and pntrain's model FLOPs utilisation (6N + 6LdT FLOPs
per token, as llm.c counts them, over the GPU's dense bf16 peak). Writes DIR/compare.json and DIR/table.md. --python is the
interpreter with the PyTorch to compare with (bench/vs_pytorch/cpu.sh makes one with PyPI's);
--budget-s stops starting runs that would not finish in time (0: no limit), and the runs left
out are named in the table, so that it is never silently short.

A translation config (arch = transformer, e.g. configs/iwslt_small.ini) compares pntrain's
encoder-decoder with TransformerMT on the config's corpus (its data key, else --data), with
pntrain's batches; tokens are target tokens on both sides. Its per-site norms are the config's,
so it makes one row per rank count whatever --norms says, its norm column reading e.g.
"config (enc power, dec layer)". Under the table, each row's parameter counts and first-update
losses (different random inits: near, not equal). --check adds, for each translation config, the
twin started from pntrain's own initial parameters (pntrain: one update at lr 1e-30, saved and
exported with pnexport; the twin: --init): the losses of --check-updates updates (dropout 0,
warmup-updates 2 on both sides, so that the steps are full-sized and PN leaves its warmup) at
every rank count, which agree to float rounding when the twin is the same model.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pn_config import read_ini  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

NORM_SITES = ("encoder-norm-self", "encoder-norm-ff", "encoder-norm-final", "decoder-norm-self",
              "decoder-norm-cross", "decoder-norm-ff", "decoder-norm-final")


def translation_norms(cfg):
    """The table's norm cell of a translation config: its per-site kinds (a site it leaves out
    takes its norm key, else layer, as pntrain's), e.g. 'config (enc power, dec layer)'."""
    fallback = cfg.get("norm", "layer")
    kinds = {site: cfg.get(site, fallback) for site in NORM_SITES}
    sides = ["%s %s" % (tag, "/".join(sorted({k for s, k in kinds.items() if s.startswith(side)})))
             for side, tag in (("encoder", "enc"), ("decoder", "dec"))]
    return "config (%s)" % ", ".join(sides)


def config_data(cfg, default):
    """A translation config's corpus: its data key (relative to the current directory, else to
    the repository root, as pntrain run from there reads it), else the --data directory."""
    d = cfg.get("data")
    if d is None:
        return default
    return d if os.path.isabs(d) or os.path.isdir(d) else os.path.normpath(os.path.join(ROOT, d))


def first_number(text):
    """The leading integer of a log fragment such as '9779 / 9779 (joint)'."""
    digits = ""
    for c in text.strip():
        if not c.isdigit():
            break
        digits += c
    return digits or None


def metrics_losses(path):
    """pntrain's per-update training losses from its metrics JSONL."""
    if not os.path.exists(path):
        return []
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return [r["loss"] for r in rows if "loss" in r and "update" in r]

# Dense bf16 tensor-core peak (FLOP/s) of the GPUs this is run on (SXM parts).
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


def median_tps(path, warmup):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    tps = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r.get("update", 0) > warmup]
    rss = [r["peak_rss_mb"] for r in rows if "peak_rss_mb" in r]
    gpu = [r["device_peak_mb"] for r in rows if "device_peak_mb" in r]
    return (statistics.median(tps) if tps else None), (max(rss) if rss else None), \
        (max(gpu) if gpu else None)


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
    ap.add_argument("--torch", default=None,
                    help="PyTorch runs: eager, compile (the twin), plain-eager, plain-compile "
                    "(plain_gpt.py; LM configs, one rank); default eager,compile,plain-eager,"
                    "plain-compile on a GPU, eager,compile on the CPU")
    ap.add_argument("--precisions", default="fp32,bf16", help="PyTorch's (bf16: autocast)")
    ap.add_argument("--pntrain-precisions", default="fp32",
                    help="pntrain's --precision values; PREC-ATTENTION (bf16-materialized): that "
                         "precision with --attention ATTENTION")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--python", default=sys.executable, help="the interpreter with PyTorch")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--budget-s", type=float, default=0)
    ap.add_argument("--check", action="store_true", help="translation configs: the twin from "
                    "pntrain's initial parameters, losses update by update")
    ap.add_argument("--check-updates", type=int, default=3)
    ap.add_argument("--pnexport", default=None, help="pnexport (default: beside --pntrain)")
    ap.add_argument("--out", default="vs_pytorch")
    a = ap.parse_args()
    if a.torch is None:
        a.torch = "eager,compile" + (",plain-eager,plain-compile" if a.device == "cuda" else "")
    modes = a.torch.split(",")
    unknown = [m for m in modes if m not in ("eager", "compile", "plain-eager", "plain-compile")]
    if unknown:
        ap.error("--torch: unknown %s (eager, compile, plain-eager, plain-compile)"
                 % ",".join(unknown))
    # the twin's columns, then the plain model's, each precision by precision
    keys = ["%s_%s" % (m, p) for plain in (False, True) for p in a.precisions.split(",")
            for m in modes if m.startswith("plain-") == plain]
    plain_keys = [k for k in keys if k.startswith("plain-")]
    twin_keys = [k for k in keys if k not in plain_keys]
    os.makedirs(a.out, exist_ok=True)
    t_start = time.time()
    total = a.warmup + a.updates
    cores = len(os.sched_getaffinity(0))
    ranks = [1] if a.device == "cuda" else [int(r) for r in a.ranks.split(",")]
    plain_runs = {}  # (config, ranks, repeat, key) -> what the plain run gave (norm-free)
    pn_precs = a.pntrain_precisions.split(",")
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

    def pntrain_cmd(config, data, norm_flags, R, threads, extra):
        """pntrain under mpirun (CPU) or alone (GPU), dropout 0, no validation."""
        cmd = [a.pntrain, "--config", config, "--data", data, "--device", a.device] + \
            norm_flags + ["--validate-interval-updates", "0", "--dropout", "0"] + extra
        if a.device == "cpu":
            mpi = [a.mpirun, "--bind-to", "none", "-np", str(R)]
            mpi += ["--allow-run-as-root"] if os.geteuid() == 0 else []
            mpi += ["--oversubscribe"] if R > cores else []
            cmd = mpi + cmd + ["--threads", str(threads)]
        return cmd

    def plain_run(config, cname, data, vocab, translation, R, threads, rep, key, row):
        """plain_gpt.py for a PyTorch column `key` (plain-MODE_PREC) of a row: (tokens/s or
        why none, peak RSS, peak GPU memory). The plain model has no norm choice: it runs once
        per config, rank count and repeat, and the rows of the other norms reuse its figures."""
        if translation:
            return "n/a (LM only)", None, None
        if R != 1:
            return "n/a (1 rank)", None, None
        mode, prec = key.split("_")
        ident = (config, R, rep, key)
        if ident not in plain_runs:
            ptag = "plain_%s_r%d_%d_%s" % (cname, R, rep + 1, key)
            cmd = [a.python, os.path.join(HERE, "plain_gpt.py"), "--config", config,
                   "--device", a.device, "--precision", prec, "--dropout", "0", "--updates",
                   str(a.updates), "--warmup", str(a.warmup), "--threads", str(threads)]
            cmd += ["--vocab", vocab] if vocab else ["--data", data]
            cmd += ["--compile"] if mode == "plain-compile" else []
            status = run(ptag, cmd, {"OMP_NUM_THREADS": str(threads)})
            res = {"tps": status}
            if status == "ok":
                last = json.loads(open(os.path.join(a.out, ptag + ".log")).read()
                                  .strip().splitlines()[-1])
                res = {"tps": last.get("tokens_per_s"), "rss": max(last.get("peak_rss_mb", [0])),
                       "gpu_mb": last.get("device_peak_mb"), "gpu": last.get("gpu"),
                       "torch": last.get("torch"), "params": last.get("params"),
                       "loss_first": last.get("loss_first")}
            plain_runs[ident] = res
            print("%s %d rank(s) #%d plain PyTorch %-13s %s" % (
                cname, R, rep + 1, key + ":", "%.0f tok/s" % res["tps"]
                if isinstance(res["tps"], float) else res["tps"]), flush=True)
        res = plain_runs[ident]
        for field in ("gpu", "torch"):
            if res.get(field):
                row.setdefault(field if field == "gpu" else "torch_version", res[field])
        if res.get("params") is not None:
            row.setdefault("plain_params", res["params"])
            row.setdefault("plain_loss_first", res["loss_first"])
        return res["tps"], res.get("rss"), res.get("gpu_mb")

    def same_init_check(config, cname, data):
        """pntrain and the twin from pntrain's initial parameters: losses of K updates."""
        K = a.check_updates
        ck = os.path.join(a.out, "check_%s_init" % cname)
        init = ck + ".safetensors"
        steps = ["--warmup-updates", "2"]
        shutil.rmtree(ck, ignore_errors=True)  # else pntrain would resume an earlier run's
        status = run("check_%s_init" % cname, pntrain_cmd(
            config, data, [], 1, cores, ["--max-update", "1", "--lr", "1e-30", "--save-dir", ck]))
        if status == "ok":
            pnexport = a.pnexport or os.path.join(os.path.dirname(a.pntrain), "pnexport")
            status = run("check_%s_export" % cname,
                         [pnexport, os.path.join(ck, "checkpoint_1"), "--out", init])
        out = []
        for R in ranks:
            threads = max(1, cores // R)
            metrics = os.path.join(a.out, "check_%s_r%d.jsonl" % (cname, R))
            if os.path.exists(metrics):
                os.remove(metrics)
            res = {"ranks": R, "pntrain": [], "pytorch": []}
            if status == "ok" and run("check_pntrain_%s_r%d" % (cname, R), pntrain_cmd(
                    config, data, [], R, threads,
                    steps + ["--max-update", str(K), "--metrics", metrics])) == "ok":
                res["pntrain"] = metrics_losses(metrics)
            ttag = "check_torch_%s_r%d" % (cname, R)
            if status == "ok" and run(ttag, [
                    a.python, os.path.join(HERE, "train_torch.py"), "--config", config, "--data",
                    data, "--device", a.device, "--dropout", "0", "--updates", str(K),
                    "--warmup", "0", "--ranks", str(R), "--threads", str(threads), "--init",
                    init] + steps, {"OMP_NUM_THREADS": str(threads)}) == "ok":
                res["pytorch"] = json.loads(open(os.path.join(a.out, ttag + ".log")).read()
                                            .strip().splitlines()[-1]).get("loss_all", [])
            pairs = list(zip(res["pntrain"], res["pytorch"]))
            res["max_abs_diff"] = max(abs(x - y) for x, y in pairs) if pairs else None
            print("%s check, %d rank(s), same initial parameters: loss pntrain %s, PyTorch %s"
                  % (cname, R, ["%.6f" % x for x in res["pntrain"]],
                     ["%.6f" % x for x in res["pytorch"]]), flush=True)
            out.append(res)
        return out

    rows, checks = [], {}
    for config in a.configs.split(","):
        cfg = read_ini(config)
        cname = os.path.splitext(os.path.basename(config))[0]
        translation = cfg.get("arch", "transformer_lm") == "transformer"
        data = config_data(cfg, a.data) if translation else a.data
        # (the row's norm, its tag in file names, the flags both sides get)
        runs = [(translation_norms(cfg), "config", [])] if translation else \
            [(n, n, ["--norm", n]) for n in a.norms.split(",")]
        if translation and a.check:
            checks[cname] = same_init_check(config, cname, data)
        for norm, ntag, norm_flags in runs:
            for R in ranks:
                threads = max(1, cores // R)
                row = {"config": cname, "norm": norm, "ranks": R, "threads": threads,
                       "arch": cfg.get("arch", "transformer_lm"), "data": data,
                       "shape": [int(cfg.get(k, v)) for k, v in (("decoder-layers", 2),
                                                                 ("decoder-embed-dim", 128),
                                                                 ("tokens-per-sample", 64))],
                       "pntrain": {p: [] for p in pn_precs}, "pntrain_rss_mb": [],
                       "pntrain_gpu_mb": [], "torch": {k: [] for k in keys},
                       "torch_rss_mb": {k: [] for k in keys}, "torch_gpu_mb": {k: [] for k in keys}}
                for rep in range(a.repeats):
                    tag = "%s_%s_r%d_%d" % (cname, ntag, R, rep + 1)
                    for prec in pn_precs:
                        ptag = tag if prec == "fp32" else "%s_%s" % (tag, prec)
                        metrics = os.path.join(a.out, "pntrain_%s.jsonl" % ptag)
                        if os.path.exists(metrics):
                            os.remove(metrics)
                        # bf16-materialized: bf16 GEMMs with the T x T probabilities in
                        # memory, against plain bf16's default (cuDNN's fused attention)
                        precision, _, attention = prec.partition("-")
                        cmd = pntrain_cmd(config, data, norm_flags, R, threads,
                                          ["--max-update", str(total), "--log-interval", "5",
                                           "--precision", precision, "--metrics", metrics] +
                                          (["--attention", attention] if attention else []))
                        status = run("pntrain_" + ptag, cmd)
                        pn, rss, gpu_mb = median_tps(metrics, a.warmup) if status == "ok" \
                            else (status, None, None)
                        row["pntrain"][prec].append(pn)
                        row["pntrain_rss_mb"].append(rss)
                        row["pntrain_gpu_mb"].append(gpu_mb)
                        log = open(os.path.join(a.out, "pntrain_%s.log" % ptag)).read() \
                            if status == "ok" else ""
                        # "vocabulary V," (LM) or "vocabulary Vs / Vt (joint)," (translation:
                        # the twin checks the target's)
                        vocab = next((first_number(l.split(": vocabulary ")[1].split(",")[0]
                                                   .split(" / ")[-1])
                                      for l in log.splitlines() if ": vocabulary " in l), None)
                        row.setdefault("params", next(
                            (int(l.split("total ")[1].split(" parameters")[0])
                             for l in log.splitlines() if "total " in l and " parameters" in l),
                            None))
                        losses = metrics_losses(metrics) if status == "ok" else []
                        if losses:
                            row.setdefault("pntrain_loss_first", losses[0])
                        print("%s %-6s %d rank(s) #%d pntrain %s: %s" % (
                            cname, ntag, R, rep + 1, prec,
                            "%.0f tok/s" % pn if status == "ok" else status), flush=True)
                    for key in twin_keys:
                        mode, prec = key.split("_")
                        cmd = [a.python, os.path.join(HERE, "train_torch.py"), "--config", config]
                        cmd += norm_flags + ["--data", data, "--device", a.device,
                                             "--precision", prec, "--dropout", "0", "--updates",
                                             str(a.updates), "--warmup", str(a.warmup), "--ranks",
                                             str(R), "--threads", str(threads)]
                        cmd += ["--vocab", vocab] if vocab else []
                        cmd += ["--compile"] if mode == "compile" else []
                        ttag = "torch_%s_%s" % (tag, key)
                        status = run(ttag, cmd, {"OMP_NUM_THREADS": str(threads)})
                        tps, trss, tgpu = status, None, None
                        if status == "ok":
                            last = json.loads(open(os.path.join(a.out, ttag + ".log")).read()
                                              .strip().splitlines()[-1])
                            tps, trss = last.get("tokens_per_s"), max(last.get("peak_rss_mb", [0]))
                            tgpu = last.get("device_peak_mb")
                            row.setdefault("gpu", last.get("gpu"))
                            row.setdefault("torch_version", last.get("torch"))
                            row.setdefault("torch_params", last.get("params"))
                            row.setdefault("torch_loss_first", last.get("loss_first"))
                        row["torch"][key].append(tps)
                        row["torch_rss_mb"][key].append(trss)
                        row["torch_gpu_mb"][key].append(tgpu)
                        print("%s %-6s %d rank(s) #%d PyTorch %-19s %s" % (
                            cname, ntag, R, rep + 1, key + ":",
                            "%.0f tok/s" % tps if isinstance(tps, float) else tps), flush=True)
                    for key in plain_keys:
                        tps, trss, tgpu = plain_run(config, cname, data, vocab, translation,
                                                    R, threads, rep, key, row)
                        row["torch"][key].append(tps)
                        row["torch_rss_mb"][key].append(trss)
                        row["torch_gpu_mb"][key].append(tgpu)
                rows.append(row)
                json.dump({"device": a.device, "rows": rows, "checks": checks},
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
    # Each PyTorch column is set against pntrain in the same precision where that ran, else fp32.
    pn_of = {k: (k.split("_")[1] if k.split("_")[1] in pn_precs else pn_precs[0]) for k in keys}
    # The twin against the plain model, mode for mode (eager / plain-eager, ...), so that a
    # reader sees whether the twin is itself slow.
    twin_of = {k: k[len("plain-"):] for k in plain_keys if k[len("plain-"):] in twin_keys}
    sides = "pntrain / PyTorch" + (" / plain" if plain_keys else "")
    head = ["config", "norm", "ranks x threads"] + ["pntrain " + p for p in pn_precs] \
        + ["PyTorch " + k for k in keys] + ["pn %s / %s" % (pn_of[k], k) for k in keys] \
        + ["%s / %s" % (twin_of[k], k) for k in plain_keys if k in twin_of] \
        + ["RSS MB %s (least)" % sides] \
        + (["GPU MB %s (least)" % sides] + ["MFU pntrain " + p for p in pn_precs]
           if a.device == "cuda" else [])
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def memory(pn, twin, plain):
        """'pntrain / twin[ / plain]' MB: pntrain's most, the least of each PyTorch side's."""
        pn, twin, plain = ([x for x in xs if x] for xs in (pn, twin, plain))
        if not pn or not twin:
            return "n/a"
        cell = "%.0f / %.0f" % (max(pn), min(twin))
        return cell + (" / %s" % ("%.0f" % min(plain) if plain else "n/a") if plain_keys else "")

    for r in rows:
        cells = [r["config"], r["norm"], "%d x %d" % (r["ranks"], r["threads"])]
        cells += [spread(r["pntrain"][p]) for p in pn_precs]
        cells += [spread(r["torch"][k]) for k in keys]
        cells += [ratio(r["pntrain"][pn_of[k]], r["torch"][k]) for k in keys]
        cells += [ratio(r["torch"][twin_of[k]], r["torch"][k]) for k in plain_keys if k in twin_of]
        cells.append(memory(r["pntrain_rss_mb"],
                            [x for k in twin_keys for x in r["torch_rss_mb"][k]],
                            [x for k in plain_keys for x in r["torch_rss_mb"][k]]))
        if a.device == "cuda":
            cells.append(memory(r["pntrain_gpu_mb"],
                                [x for k in twin_keys for x in r["torch_gpu_mb"][k]],
                                [x for k in plain_keys for x in r["torch_gpu_mb"][k]]))
            L, d, T = r["shape"]
            # 6N + 6LdT counts a decoder-only LM's tokens: no figure for the encoder-decoder.
            lm = r.get("arch") != "transformer"
            flops = (6 * r["params"] + 6 * L * d * T) if r.get("params") and lm else None
            r["mfu_pntrain"] = {}
            for p in pn_precs:
                pn = [x for x in r["pntrain"][p] if isinstance(x, (int, float))]
                mfu = statistics.median(pn) * flops / peak if pn and flops and peak else None
                r["mfu_pntrain"][p] = mfu
                cells.append("%.1f%%" % (100 * mfu) if mfu else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    lines += [""] + same_model_lines(rows, checks)
    print("\n" + "\n".join(lines))
    open(os.path.join(a.out, "table.md"), "w").write("\n".join(lines) + "\n")
    json.dump({"device": a.device, "where": where, "torch": version, "rows": rows,
               "checks": checks}, open(os.path.join(a.out, "compare.json"), "w"), indent=1)


def same_model_lines(rows, checks):
    """Under the table: that each twin is its pntrain model (parameter counts, first losses,
    and --check's losses from the same initial parameters)."""
    fmt = lambda x: "%.4f" % x if isinstance(x, (int, float)) else "n/a"
    out = []
    for r in rows:
        pn, pt, pl = r.get("params"), r.get("torch_params"), r.get("plain_params")
        plain = "" if pl is None else " / plain %s%s" % (pl, "" if pn in (pl, None) else
                                                         " (DIFFERS from pntrain's)")
        out.append("%s %s %d rank(s): parameters pntrain %s / PyTorch %s%s%s; first-update loss "
                   "pntrain %s / PyTorch %s%s (each from its own random init)" % (
                       r["config"], r["norm"], r["ranks"], pn, pt,
                       "" if pn == pt or None in (pn, pt) else " (DIFFER)", plain,
                       fmt(r.get("pntrain_loss_first")), fmt(r.get("torch_loss_first")),
                       "" if pl is None else " / plain %s" % fmt(r.get("plain_loss_first"))))
    for cname, results in checks.items():
        for c in results:
            out.append("%s, %d rank(s), from pntrain's initial parameters: loss pntrain %s / "
                       "PyTorch %s, largest difference %s" % (
                           cname, c["ranks"], " ".join(fmt(x) for x in c["pntrain"]) or "n/a",
                           " ".join(fmt(x) for x in c["pytorch"]) or "n/a",
                           "%.1e" % c["max_abs_diff"] if c["max_abs_diff"] is not None
                           else "n/a"))
    return out


if __name__ == "__main__":
    main()
