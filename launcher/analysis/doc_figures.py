#!/usr/bin/env python3
"""Draws the figure the README shows from the committed reproduction reports:
docs/img/results_ptb.png, PTB test perplexity of each norm and seed at 12 and 30 epochs on the
CPU (results/reproduce_lm_medium/, results/reproduce_lm_long/: report.json, or the cells'
eval.json where a run has no report yet).
Each seed is its own marker; the mean is drawn only over two seeds or more; nothing is drawn for
a norm without cells. Usage: doc_figures.py [--root DIR]
"""
import argparse
import os
import statistics
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from doc_tables import NORMS, values as report_values  # noqa: E402

PANELS = [("reproduce_lm_medium", "12 epochs (--medium)"), ("reproduce_lm_long", "30 epochs (--long)")]
COLORS = {"layer": "#1f77b4", "batch": "#2ca02c", "power_v": "#9467bd", "power": "#d62728",
          "power_authors": "#ff7f0e"}
MARKERS = {"layer": "o", "batch": "s", "power_v": "^", "power": "D", "power_authors": "v"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.normpath(os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "..", "..")))
    root = ap.parse_args().root
    fig, axes = plt.subplots(1, len(PANELS), figsize=(10, 4.2), constrained_layout=True)
    for ax, (run, title) in zip(axes, PANELS):
        got = report_values(root, run)
        for i, (key, label) in enumerate(NORMS):
            values = got.get(key, [])
            if not values:
                continue
            x = [i + 0.08 * (j - (len(values) - 1) / 2) for j in range(len(values))]
            ax.scatter(x, values, s=40, marker=MARKERS[key], facecolors="none",
                       edgecolors=COLORS[key], linewidths=1.5, zorder=3)
            if len(values) > 1:
                m = statistics.mean(values)
                ax.hlines(m, i - 0.3, i + 0.3, colors=COLORS[key], linewidth=2.5, zorder=2)
            if key == "layer" and len(values) > 1:
                ax.axhline(statistics.mean(values), color=COLORS[key], linestyle="--",
                           linewidth=1, zorder=1)
        ax.set_xticks(range(len(NORMS)))
        ax.set_xticklabels([label.replace(" (", "\n(") for _, label in NORMS], fontsize=10)
        ax.tick_params(axis="y", labelsize=10)
        ax.set_ylabel("PTB test perplexity (lower is better)", fontsize=10)
        n = max((len(v) for v in got.values()), default=0)
        ax.set_title("%s, %d seeds each, CPU" % (title, n), fontsize=11)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Each seed (open marker) and the mean over seeds (bar); dashed: LN's mean. "
                 "2-block d-128 Transformer, 4096-token updates", fontsize=10)
    out = os.path.join(root, "docs", "img", "results_ptb.png")
    fig.savefig(out, dpi=110)
    print("doc_figures: wrote %s" % os.path.relpath(out, root))


if __name__ == "__main__":
    main()
