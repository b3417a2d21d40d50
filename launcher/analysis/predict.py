#!/usr/bin/env python3
"""What synchronized statistics cost: an alpha-beta model of all-reduce, fitted here, checked
against pnbench's measurement, and carried to 8-1024 GPUs with published NCCL figures
(`pnbench --predict` runs it; docs/benchmarks.md shows its output).

1. Fit. Each job size R and sync group size K of --sweep (pnbench --predict under mpirun -np R
   --sync-group-size K: seconds per blocking all-reduce within a group, over message sizes
   from 8 bytes to the gradient bucket; the slowest rank's 20th percentile of single calls, the
   cost when the ranks run rather than wait for a busy machine's scheduler) gets
   t(bytes) = alpha + beta * bytes, least squares on the relative error (so that the
   latency-bound small messages weigh as much as the bandwidth-bound large ones).
2. Check. (a) Each row of --bench (pnbench's CSV) with statistics all-reduces predicts its
   statistics time per update from its own counts. A row that pnbench --split-stats-wait
   --probe-allreduce measured compares its transfer (stats_transfer_ms, the all-reduces after a
   barrier has gathered the group) with count * t(bytes / count), where t is the cost per
   all-reduce that the probes of the same run measured inside training (--in-training), as
   alpha-beta lines between neighbouring probe sizes: an all-reduce between forward and
   backward finds cold caches and costs 5-50 times a back-to-back one, and Open MPI changes
   protocol at 4 KiB, so no single line over all sizes holds there. Other rows compare
   stats_transfer_ms, or else stats_allreduce_ms (which includes the time a rank waits for
   slower peers: no alpha-beta model holds that), with the fit of the sweep. (b) The same
   prediction for replay.csv beside --sweep: one update's statistics all-reduces replayed back
   to back by pnbench --predict (the pure transfer cost), against the sweep's fit.
3. Scale-out. For a GPT-2-small-sized LM and the configs/paper_iwslt14.ini model, the share of
   an update that the statistics all-reduces take, for sync_batch (sync-BN) and sync_power_v
   (sync-PN-V) in groups of 8 GPUs (one NVLink node) and across the whole job, against PN
   (no statistics all-reduce), at 8, 64, 256 and 1024 GPUs, with the NCCL figures of NCCL below.
   Every number there is a prediction; SOURCES says which inputs are published and which assumed.

Usage: predict.py --sweep allreduce.csv [--bench bench.csv] [--in-training CSV] --out DIR
Writes DIR/fit.csv, DIR/check.csv, DIR/scaleout.csv and DIR/scaleout.png (with matplotlib).
"""
import argparse
import csv
import math
import os
import sys
from collections import defaultdict

# Published NCCL all-reduce figures (H100-class nodes of 8 GPUs), with where they come from.
NCCL = {
    # Small-message all-reduce latency on NVLink: about 6 us for 2 H100 with NVLink SHARP and
    # CUDA graphs (NVIDIA/nccl#1259, nccl-tests all_reduce_perf output); that report shows
    # that it grows with the GPU count, so for 8 GPUs this is a lower bound.
    "nvlink_alpha_s": 6e-6,
    # Peak all-reduce bus bandwidth of 8 H100 over NVLink (NVLS): about 480 GB/s, per the NCCL
    # maintainer in NVIDIA/nccl-tests#212.
    "nvlink_busbw": 480e9,
    # 8-byte all-reduce across 2 nodes (1 A100 each) over InfiniBand HDR: 19.9 us
    # (NVIDIA/nccl-tests#150, all_reduce_perf output).
    "ib_alpha_hop_s": 19.9e-6,
    # Inter-node bus bandwidth: 12.2 GB/s per 100 Gb/s InfiniBand adapter "is as good as you
    # can get" (NCCL maintainer, NVIDIA/nccl-tests#29); ASSUMED here: one 400 Gb/s
    # adapter per GPU (DGX H100 layout), i.e. 4 x 12.2 = 48.8 GB/s per GPU.
    "ib_busbw": 4 * 12.2e9,
}
# Inputs that are assumptions, not published measurements.
ASSUMED = {
    # Sustained training throughput of one GPU. ASSUMED: 400 TFLOP/s (about 40% of an H100's
    # dense BF16 peak; the utilisation is a guess, not a measurement).
    "flops_per_s": 400e12,
    # Across nodes NCCL reduces small messages over a tree: ASSUMED one 2-node latency
    # (ib_alpha_hop_s) per tree level, log2(nodes) levels, on top of the NVLink latency.
    "gpus_per_node": 8,
    # The IWSLT'14 joint BPE vocabulary (fairseq's prepare-iwslt14.sh, 10000 merges): ASSUMED
    # 10000 words (the training split, which fixes it, is not on this machine).
    "iwslt_vocab": 10000,
}
SOURCES = """published: NVLink latency 6 us (NVIDIA/nccl#1259), NVLink busbw 480 GB/s
(NVIDIA/nccl-tests#212), 2-node InfiniBand latency 19.9 us (NVIDIA/nccl-tests#150), 12.2 GB/s per
100 Gb/s adapter (NVIDIA/nccl-tests#29). assumed: one 400 Gb/s adapter per GPU (48.8 GB/s),
tree latency = NVLink + log2(nodes) x 19.9 us, 400 TFLOP/s sustained per GPU, gradient
all-reduce not overlapped (fp32, one per update), IWSLT vocabulary 10000, one micro-step per
update, compute = 6 x parameters x tokens."""

GPUS = [8, 64, 256, 1024]


def fit(points):
    """alpha, beta of t = alpha + beta * bytes minimising sum ((fit - t) / t)^2."""
    s11 = s12 = s22 = r1 = r2 = 0.0
    for x, t in points:
        w = 1.0 / (t * t)
        s11 += w
        s12 += w * x
        s22 += w * x * x
        r1 += w * t
        r2 += w * x * t
    det = s11 * s22 - s12 * s12
    alpha = (r1 * s22 - r2 * s12) / det
    beta = (s11 * r2 - s12 * r1) / det
    return alpha, beta


def piecewise(points, x):
    """Cost at x bytes on the alpha-beta line through the two measured sizes around x (the
    nearest two at either end)."""
    pts = sorted(points)
    if len(pts) == 1:
        return pts[0][1]
    i = 1
    while i < len(pts) - 1 and pts[i][0] < x:
        i += 1
    (x0, t0), (x1, t1) = pts[i - 1], pts[i]
    return t0 + (t1 - t0) * (x - x0) / (x1 - x0)


def nccl_time(gpus, nbytes):
    """Predicted NCCL all-reduce seconds of nbytes over `gpus` GPUs (NCCL dict, ASSUMED)."""
    if gpus <= 1:
        return 0.0
    per_node = ASSUMED["gpus_per_node"]
    nodes = max(1, math.ceil(gpus / per_node))
    alpha = NCCL["nvlink_alpha_s"]
    busbw = NCCL["nvlink_busbw"]
    if nodes > 1:
        alpha += NCCL["ib_alpha_hop_s"] * math.ceil(math.log2(nodes))
        busbw = NCCL["ib_busbw"]
    return alpha + nbytes * 2.0 * (gpus - 1) / gpus / busbw


def lm_params(layers, d, ffn, vocab, ctx):
    block = 4 * d * d + 4 * d + 2 * d * ffn + ffn + d + 4 * d  # attention, ffn, 2 norms
    return vocab * d + ctx * d + layers * block + 2 * d


def translation_params(enc, dec, d, ffn, vocab):
    attn = 4 * d * d + 4 * d
    ff = 2 * d * ffn + ffn + d
    enc_block = attn + ff + 4 * d
    dec_block = 2 * attn + ff + 6 * d
    return vocab * d + enc * enc_block + dec * dec_block + 4 * d  # shared embeddings


# The two models: parameters, tokens per GPU per micro-step, synchronized norm layers, d.
MODELS = {
    "gpt2-small (12 x 768, 16384 tokens/GPU)": dict(
        params=lm_params(12, 768, 3072, 50257, 1024), tokens=16384, norms=25, d=768),
    "paper_iwslt14 (6+6 x 512, 4096 tokens/GPU; encoder norms)": dict(
        params=translation_params(6, 6, 512, 1024, ASSUMED["iwslt_vocab"]), tokens=4096,
        norms=13, d=512),
}
# Bytes of one layer's statistics all-reduces per micro-step (forward, backward), as pntrain
# packs them (doubles): sync_batch [count | sum x | sum x^2], [sum dy | sum dy x];
# sync_power_v [count | sum x^2], [sum g xh].
MESSAGES = {"sync_batch": lambda d: [(1 + 2 * d) * 8, 2 * d * 8],
            "sync_power_v": lambda d: [(1 + d) * 8, d * 8]}


def scaleout():
    rows = []
    for model, m in MODELS.items():
        compute = 6.0 * m["params"] * m["tokens"] / ASSUMED["flops_per_s"]
        for gpus in GPUS:
            grad = nccl_time(gpus, 4 * m["params"])
            rows.append(dict(model=model, norm="power (PN)", group="-", gpus=gpus,
                             compute_ms=1e3 * compute, grad_ms=1e3 * grad, stats_ms=0.0,
                             stats_share=0.0))
            for norm, msgs in MESSAGES.items():
                for label, k in (("8 (one node)", 8), ("whole job", gpus)):
                    stats = m["norms"] * sum(nccl_time(min(k, gpus), b) for b in msgs(m["d"]))
                    rows.append(dict(model=model, norm=norm, group=label, gpus=gpus,
                                     compute_ms=1e3 * compute, grad_ms=1e3 * grad,
                                     stats_ms=1e3 * stats,
                                     stats_share=stats / (compute + grad + stats)))
    return rows


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)


def plot(rows, fits, sweep, probes, crowded, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    ax = axes[0]
    for r in sorted(fits):
        pts = sorted(sweep[r])
        line, = ax.plot([p[0] for p in pts], [1e6 * p[1] for p in pts], "o",
                        label="%d ranks, groups of %d" % r)
        a, b = fits[r]
        xs = [p[0] for p in pts]
        ax.plot(xs, [1e6 * (a + b * x) for x in xs], "-", color=line.get_color())
    # The in-training probes of the sync_batch runs with a core per rank.
    for run, pts in sorted(probes.items()):
        norm, r, k, per_update = run
        if norm == "sync_batch" and run not in crowded:
            xs = sorted(pts)
            ax.plot(xs, [1e6 * pts[b] for b in xs], "x--", lw=0.8,
                    label="%d ranks in training, %s %d B/update" % (r, norm, per_update))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message bytes")
    ax.set_ylabel("us per all-reduce")
    ax.set_title("measured here: back to back (dots) with alpha-beta fit (lines); in training (x)",
                 fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    for ax, model in zip(axes[1:], MODELS):
        for norm in MESSAGES:
            for group, style in (("8 (one node)", "-"), ("whole job", "--")):
                pts = [r for r in rows if r["model"] == model and r["norm"] == norm and
                       r["group"] == group]
                ax.plot([p["gpus"] for p in pts], [100 * p["stats_share"] for p in pts],
                        style, marker="o", label="%s, groups of %s" % (norm, group))
        ax.axhline(0, color="gray", lw=1.5, label="power (PN): no statistics all-reduce")
        ax.set_xscale("log", base=2)
        ax.set_xticks(GPUS)
        ax.set_xticklabels([str(g) for g in GPUS])
        ax.set_xlabel("GPUs")
        ax.set_ylabel("% of an update in statistics all-reduces")
        ax.set_title("PREDICTED: " + model, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True



def print_check(title, check, csv_path):
    """Prints measured against predicted all-reduce times, marking ratios outside 25%, and
    writes them to csv_path (nothing when check is empty)."""
    if not check:
        return
    print("\nCHECK: " + title)
    print("%-12s %5s %5s %5s %7s %9s %-15s %-24s %11s %12s %7s" % (
        "norm", "ranks", "K", "over", "count", "bytes", "measured", "fit", "measured ms",
        "predicted ms", "ratio"))
    for c in check:
        print("%-12s %5s %5s %5s %7s %9s %-15s %-24s %11.3f %12.3f %7.2f%s" % (
            c["norm"], c["ranks"], c["sync_group_size"], c["oversubscribed"],
            "%.0f" % float(c["allreduces"]), c["bytes"], c["measured"], c["model"],
            c["measured_ms"], c["predicted_ms"],
            c["ratio"], "" if abs(c["ratio"] - 1) <= 0.25 else "  (outside 25%)"))
    write_csv(csv_path, check)

def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", required=True, help="allreduce.csv of pnbench --predict")
    ap.add_argument("--bench", help="pnbench CSV with statistics all-reduce rows to check")
    ap.add_argument("--in-training", help="allreduce_in_training.csv of pnbench "
                    "--probe-allreduce (default: beside --sweep)")
    ap.add_argument("--out", required=True, help="output directory")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    # The newest measurement of each (ranks, bytes).
    latest = {}
    for row in csv.DictReader(open(a.sweep)):
        latest[(int(row["ranks"]), int(row["sync_group_size"]), int(row["bytes"]))] = \
            float(row["seconds"])
    sweep = defaultdict(list)  # (job ranks, group ranks) -> [(bytes, seconds)]
    for (r, k, b), t in latest.items():
        sweep[(r, k)].append((b, t))
    fits = {r: fit(p) for r, p in sweep.items() if len(p) >= 2}
    print("MEASURED on this machine, FITTED: all-reduce t = alpha + beta * bytes")
    print("%6s %6s %12s %14s %12s" % ("ranks", "group", "alpha (us)", "beta (ns/B)",
                                       "1/beta GB/s"))
    fit_rows = []
    for r, k in sorted(fits):
        al, be = fits[(r, k)]
        worst = max(abs(al + be * b - t) / t for b, t in sweep[(r, k)])
        print("%6d %6d %12.2f %14.4f %12.2f   (largest misfit %.0f%%)" %
              (r, k, 1e6 * al, 1e9 * be, 1e-9 / be if be > 0 else float("inf"), 100 * worst))
        fit_rows.append(dict(ranks=r, sync_group_size=k, alpha_s=al, beta_s_per_byte=be,
                             worst_misfit=worst))
    if fit_rows:
        write_csv(os.path.join(a.out, "fit.csv"), fit_rows)

    # The probes of each pnbench --probe-allreduce run (newest per size):
    # (norm, ranks, K, statistics bytes per update) -> {bytes: seconds per all-reduce}.
    probes = defaultdict(dict)
    crowded = set()  # the runs with more ranks than cores
    in_training = a.in_training or os.path.join(
        os.path.dirname(os.path.abspath(a.sweep)), "allreduce_in_training.csv")
    if os.path.exists(in_training):
        for p in csv.DictReader(open(in_training)):
            run = (p["norm"], int(p["ranks"]), int(p["sync_group_size"]),
                   round(float(p["stats_bytes_per_update"])))
            probes[run][int(p["bytes"])] = float(p["seconds"])
            if p["oversubscribed"] == "1":
                crowded.add(run)
    if a.bench and os.path.exists(a.bench):
        rows = [r for r in csv.DictReader(open(a.bench))
                if float(r.get("stats_allreduces_per_update") or 0) > 0]
        key_of = lambda r: (int(r["ranks"]), int(r.get("sync_group_size") or 0))
        check = []
        for row in rows:
            key, split = key_of(row), bool(row.get("stats_transfer_ms"))
            n, nbytes = float(row["stats_allreduces_per_update"]), float(row["stats_bytes_per_update"])
            run = (row["norm"], key[0], key[1], round(nbytes))
            # One run's messages differ by a few bytes at most (pntrain packs d or 2d sums and
            # a count): each is predicted at their mean size.
            if split and len(probes.get(run, {})) >= 2:
                pred, model = 1e3 * n * piecewise(probes[run].items(), nbytes / n), \
                    "in training, probes"
            elif key in fits:
                al, be = fits[key]
                pred, model = 1e3 * (n * al + nbytes * be), "sweep"
            else:
                continue
            meas = float(row["stats_transfer_ms"] if split else row["stats_allreduce_ms"])
            check.append(dict(norm=row["norm"], ranks=row["ranks"], sync_group_size=key[1],
                              measured="transfer" if split else "wait + transfer", model=model,
                              oversubscribed=row["oversubscribed"], allreduces=n,
                              bytes=row["stats_bytes_per_update"], measured_ms=meas,
                              predicted_ms=pred, ratio=pred / meas if meas > 0 else float("nan")))
        print_check("statistics all-reduce per update, MEASURED by pnbench vs PREDICTED from "
                    "its counts and an alpha-beta fit of its sync group's ranks", check,
                    os.path.join(a.out, "check.csv"))

    replay_path = os.path.join(os.path.dirname(os.path.abspath(a.sweep)), "replay.csv")
    if os.path.exists(replay_path):
        replays = {}
        for row in csv.DictReader(open(replay_path)):
            replays[(row["norm"], row["ranks"], row["sync_group_size"])] = row  # newest wins
        check = []
        for (norm, ranks, k), row in sorted(replays.items()):
            if (int(ranks), int(k)) not in fits:
                continue
            al, be = fits[(int(ranks), int(k))]
            meas = 1e3 * float(row["seconds"])
            pred = 1e3 * (int(row["messages"]) * al + int(row["bytes"]) * be)
            check.append(dict(norm=norm, ranks=ranks, sync_group_size=k, measured="replay",
                              model="sweep",
                              oversubscribed=row["oversubscribed"], allreduces=row["messages"],
                              bytes=row["bytes"], measured_ms=meas, predicted_ms=pred,
                              ratio=pred / meas if meas > 0 else float("nan")))
        print_check("one update's statistics all-reduces replayed back to back (pnbench "
                    "--predict), MEASURED vs PREDICTED from the fit of the group's ranks", check,
                    os.path.join(a.out, "check_replay.csv"))

    rows = scaleout()
    write_csv(os.path.join(a.out, "scaleout.csv"), rows)
    print("\nPREDICTED (not measured): share of an update in statistics all-reduces, NCCL on "
          "H100-class nodes")
    print("%-58s %-13s %-13s %6s %10s %9s %9s %7s" % (
        "model", "norm", "sync group", "GPUs", "compute ms", "grad ms", "stats ms", "share"))
    for r in rows:
        print("%-58s %-13s %-13s %6d %10.2f %9.2f %9.3f %6.1f%%" % (
            r["model"], r["norm"], r["group"], r["gpus"], r["compute_ms"], r["grad_ms"],
            r["stats_ms"], 100 * r["stats_share"]))
    print("\n" + SOURCES)
    png = os.path.join(a.out, "scaleout.png")
    if plot(rows, fits, sweep, probes, crowded, png):
        print("predict: wrote %s" % png)
    else:
        print("predict: matplotlib is missing, so %s was skipped" % png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
