#!/usr/bin/env python3
"""Plots of pntrain --metrics files (JSONL), one line per file.

Writes to OUT (default: the current directory):
  loss.png        training loss over updates
  valid_ppl.png   validation perplexity over updates
  norm_stats.png  when the files hold "norm_stats" (pntrain --probe-norm-stats): one panel per
                  statistic (dist_mean, dist_var, dist_psi2, g_mu, g_sigma2, g_psi2) over
                  updates, one line per file and layer (a colour per layer, a line style per
                  file: the first solid, the second dashed), long runs as a running mean over
                  about 1/60 of their updates -- the analogues of Figures 2 to 4 of the
                  PowerNorm paper (BN vs PN-V vs PN).

Usage: plot.py METRICS.jsonl... [--out DIR]
Every file is one run, all runs share each figure, and the legend names them by the file name
(or by the folder name when the file is metrics.jsonl). A run that was interrupted and resumed
is drawn once: where a file holds an update twice (files written before pntrain truncated them
on resume), the later record wins. Perplexity is drawn on a log scale.
"""
import argparse
import math
import os
import sys

from pn_metrics import read_metrics

STATS = ["dist_mean", "dist_var", "dist_psi2", "g_mu", "g_sigma2", "g_psi2"]
TITLES = {
    "dist_mean": "distance of batch mean to running mean",
    "dist_var": "distance of batch variance to running variance",
    "dist_psi2": "distance of batch psi^2 to running psi^2",
    "g_mu": "gradient part through the mean (g_mu)",
    "g_sigma2": "gradient part through the variance (g_sigma2)",
    "g_psi2": "gradient part through psi^2 (g_psi2)",
}


def label_of(path, paths):
    base = os.path.basename(path)
    if base == "metrics.jsonl" or sum(os.path.basename(p) == base for p in paths) > 1:
        parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
        return parent + ("" if base == "metrics.jsonl" else "/" + base)
    return os.path.splitext(base)[0]


def finite(v):
    return isinstance(v, (int, float)) and math.isfinite(v)


def once_per_update(lines):
    """The records in update order, one per update: the last one written wins (a resumed run
    writes again the updates after its checkpoint)."""
    by_update = {}
    for j in lines:
        if isinstance(j.get("update"), int):
            by_update[j["update"]] = j
    return [by_update[u] for u in sorted(by_update)]


# Line styles of the runs of norm_stats.png, in the order of the files (colours are layers).
RUN_STYLES = ["-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1))]


def running_mean(pts, window):
    """pts [(update, value)] averaged over the `window` records up to each (window 1: as is)."""
    if window <= 1:
        return pts
    out, acc = [], 0.0
    for i, (u, v) in enumerate(pts):
        acc += v
        if i >= window:
            acc -= pts[i - window][1]
        out.append((u, acc / min(i + 1, window)))
    return out


def norm_stats_figure(plt, series, stats, labels):
    """One panel per statistic; a colour per layer and a line style per run (the first file
    solid, the second dashed, then dotted...), one legend of both beside the panels.
    Long runs are drawn as a running mean over about 1/60 of their updates (said in each
    panel), since the per-update values scatter more than the runs differ."""
    layers = sorted({layer for st in series.values() for (_, layer) in st})
    cmap = plt.get_cmap("tab10" if len(layers) <= 10 else "tab20")
    color = {layer: cmap(i % cmap.N) for i, layer in enumerate(layers)}
    style = {label: RUN_STYLES[i % len(RUN_STYLES)] for i, label in enumerate(labels)}
    cols = 2 if len(stats) == 4 else min(3, len(stats))
    rows = (len(stats) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.6 * cols, 3.9 * rows), squeeze=False)
    for k, stat in enumerate(stats):
        ax = axes[k // cols][k % cols]
        windows = set()
        for (label, layer), pts in sorted(series[stat].items()):
            window = max(1, len(pts) // 60)
            windows.add(window)
            ax.plot(*zip(*running_mean(pts, window)), color=color[layer], ls=style[label],
                    linewidth=1.3)
        ax.set_title(TITLES.get(stat, stat), fontsize="medium")
        ax.set_xlabel("update")
        w = max(windows)
        ax.set_ylabel(stat + (" (running mean of %d updates)" % w if w > 1 else ""),
                      fontsize="small")
        if all(v > 0 for pts in series[stat].values() for _, v in pts):
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    for k in range(len(stats), rows * cols):
        axes[k // cols][k % cols].axis("off")
    from matplotlib.lines import Line2D
    shown = [label for label in labels
             if any(lab == label for st in series.values() for (lab, _) in st)]
    handles = [Line2D([], [], color="none", label="layer (colour):")]
    handles += [Line2D([], [], color=color[layer], lw=2, label=layer) for layer in layers]
    handles += [Line2D([], [], color="none", label=" "),
                Line2D([], [], color="none", label="run (line style):")]
    handles += [Line2D([], [], color="black", ls=style[label], lw=1.3, label=label)
                for label in shown]
    fig.tight_layout()
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 0.97),
               fontsize="small", frameon=False, handlelength=3)
    return fig


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("metrics", nargs="+", help="pntrain --metrics files")
    p.add_argument("--out", default=".", help="output directory (default .)")
    a = p.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot: matplotlib is missing: apt-get install python3-matplotlib", file=sys.stderr)
        return 2
    runs = []
    for path in a.metrics:
        if not os.path.isfile(path):
            print("plot: no metrics file '%s'" % path, file=sys.stderr)
            return 2
        ups, vals = read_metrics(path, warn=True)
        runs.append((label_of(path, a.metrics), once_per_update(ups), once_per_update(vals)))
    os.makedirs(a.out, exist_ok=True)
    written = []

    def save(fig, name, **kw):
        fig.tight_layout()
        path = os.path.join(a.out, name)
        fig.savefig(path, dpi=110, **kw)
        plt.close(fig)
        written.append(path)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, ups, _ in runs:
        pts = [(u["update"], u["loss"]) for u in ups if finite(u.get("loss"))]
        if pts:
            ax.plot(*zip(*pts), label=label, linewidth=1)
    ax.set_xlabel("update")
    ax.set_ylabel("training loss (nats/token)")
    ax.set_title("training loss")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    save(fig, "loss.png")

    if any(v for _, _, v in runs):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for label, _, vals in runs:
            pts = [(v["update"], v["valid_ppl"]) for v in vals if finite(v.get("valid_ppl"))]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=label)
        ax.set_xlabel("update")
        ax.set_ylabel("validation perplexity (log scale)")
        ax.set_yscale("log")
        ax.set_title("validation perplexity")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
        save(fig, "valid_ppl.png")
    else:
        print("plot: no validation lines; valid_ppl.png skipped")

    # norm_stats: {layer: {stat: value}} per update line.
    series = {}  # stat -> {(label, layer): [(update, value)]}
    for label, ups, _ in runs:
        for u in ups:
            for layer, stats in (u.get("norm_stats") or {}).items():
                for stat, v in stats.items():
                    if finite(v):
                        series.setdefault(stat, {}).setdefault((label, layer), []).append(
                            (u["update"], v))
    stats = [s for s in STATS if s in series] + sorted(s for s in series if s not in STATS)
    if stats:
        save(norm_stats_figure(plt, series, stats, [label for label, _, _ in runs]),
             "norm_stats.png", bbox_inches="tight")
    else:
        print("plot: no \"norm_stats\" in the files (run pntrain with --probe-norm-stats); "
              "norm_stats.png skipped")
    for path in written:
        print("plot: wrote " + path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
