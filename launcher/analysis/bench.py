#!/usr/bin/env python3
"""Strong and weak scaling of pntrain over rank counts and norms (`launcher/pn bench`).

For every mode, norm and rank count R (1 first: it is the efficiency baseline), one
    mpirun -np R [--oversubscribe] -x OMP_NUM_THREADS=max(1, cores/R) pnbench --mode MODE
        --tokens N --norm NORM --warmup W --measure M --csv OUT/bench.csv --config CONFIG ...
Strong scaling keeps the tokens of a micro-step over all ranks fixed at N (each rank takes
N/R); weak scaling gives every rank N tokens. pnbench trains W + M updates and appends one row
of medians over the M measured updates (`pnbench --help` names the columns): tokens/s, speedup
and scaling efficiency (speedup / R) against 1 rank, and the per-update time split (compute,
statistics all-reduce, exposed gradient all-reduce, optimizer). On one machine the ranks share
its cores (threads per rank = cores / R), so there the ideal speedup is 1, not R; efficiency is
a scaling figure when every rank brings its own cores or GPU. Rank counts above the cores still
run (--oversubscribe) and are marked `oversubscribed` in the CSV: those timings only show that
it runs, they are not scaling figures.

Writes OUT/bench.csv (rewritten by every run), one log per run (OUT/<mode>_<norm>_np<R>.log)
and, when matplotlib is installed, OUT/bench.png: per mode, tokens/s and efficiency over ranks
(one line per norm; hollow markers are oversubscribed) and the stacked time split per run.

Synchronized norms run once per sync group size of --group-sizes (a list of numbers and `world`,
default `world`: every rank in one group) that divides R (--sync-group-size; the CSV's
sync_group_size column, with the statistics all-reduces' count and bytes per update).

Usage: bench.py --pnbench BUILD/bin/pnbench [--ranks 1,2,4] [--norms layer,sync_batch,power]
                [--group-sizes 1,2,world]
                [--modes strong,weak] [--tokens 2048] [--warmup 3] [--measure 10]
                [--config configs/default.ini] [--out DIR] [--mpirun-args ARGS]
                [-- extra pntrain flags]
"""
import argparse
import csv
import os
import shlex
import subprocess
import sys

from pn_metrics import int_list, registry_norms, split_passthrough

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The time split columns of pnbench's CSV, stacked in this order in the PNG.
SPLIT = [("compute_ms", "compute (fwd+bwd)"), ("stats_allreduce_ms", "statistics all-reduce"),
         ("grad_allreduce_exposed_ms", "gradient all-reduce (exposed)"),
         ("optimizer_ms", "optimizer"), ("other_ms", "other")]


def die(msg):
    print("bench: error: " + msg, file=sys.stderr)
    sys.exit(2)


def known_norms(pnbench):
    """The norm names of the registry, from `pntrain --list-norms` beside pnbench."""
    pntrain = os.path.join(os.path.dirname(os.path.abspath(pnbench)), "pntrain")
    try:
        return registry_norms(pntrain)
    except (OSError, subprocess.CalledProcessError) as e:
        die("cannot list the norms with '%s --list-norms' (%s): build pntrain beside pnbench"
            % (pntrain, e))


def mpirun_cmd(ranks, cores, extra_args):
    # Every rank count runs under mpirun (1 too), so all rows pay the same launch overheads.
    cmd = ["mpirun", "-np", str(ranks), "--bind-to", "none"] + shlex.split(extra_args)
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if ranks > cores:
        cmd.append("--oversubscribe")  # more ranks than cores: runs, but not a scaling figure
    # Total threads = cores where possible; pnbench reads the same rule from its node.
    return cmd + ["-x", "OMP_NUM_THREADS=%d" % max(1, cores // ranks)]


def num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")


def series(row):
    """The plot's name of a row: the norm, and for a synchronized norm its sync group size."""
    norm = row["norm"]
    if not norm.startswith("sync_") or not row.get("sync_group_size"):
        return norm
    k = row["sync_group_size"]
    return "%s K=%s" % (norm, "world" if k == row["ranks"] else k)


def group_sizes(spec, ranks):
    """The distinct sync group sizes of --group-sizes that divide `ranks` (`world` = ranks)."""
    out = []
    for item in spec.split(","):
        k = ranks if item == "world" else int(item)
        if ranks % k == 0 and k not in out:
            out.append(k)
    return out


def write_png(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    fig, axes = plt.subplots(len(modes), 3, figsize=(15, 4.2 * len(modes)), squeeze=False)
    for row_axes, mode in zip(axes, modes):
        mine = [r for r in rows if r["mode"] == mode]
        ax_tps, ax_eff, ax_split = row_axes
        for norm in dict.fromkeys(series(r) for r in mine):
            pts = sorted((int(r["ranks"]), num(r["tokens_per_s"]), num(r["efficiency"]),
                          r["oversubscribed"] == "1") for r in mine if series(r) == norm)
            xs = [p[0] for p in pts]
            line, = ax_tps.plot(xs, [p[1] for p in pts], marker="o", label=norm)
            ax_eff.plot(xs, [p[2] for p in pts], marker="o", color=line.get_color(), label=norm)
            over = [p for p in pts if p[3]]
            for ax, k in ((ax_tps, 1), (ax_eff, 2)):  # hollow: oversubscribed
                ax.scatter([p[0] for p in over], [p[k] for p in over], s=90, zorder=3,
                           facecolors="white", edgecolors=line.get_color())
        ranks = sorted({int(r["ranks"]) for r in mine})
        for ax, ylabel in ((ax_tps, "tokens/s"), (ax_eff, "efficiency vs 1 rank")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(ranks)
            ax.set_xticklabels([str(x) for x in ranks])
            ax.set_xlabel("ranks")
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
            ax.legend(title="norm", fontsize=8)
        ax_eff.axhline(1.0, color="gray", lw=0.8, ls="--")
        ax_tps.set_title("%s scaling (hollow: oversubscribed, not a scaling figure)" % mode,
                         fontsize=9)
        ax_eff.set_title("%s scaling efficiency" % mode, fontsize=9)
        labels = ["%s\n%s" % (series(r), r["ranks"]) for r in mine]
        bottom = [0.0] * len(mine)
        for col, label in SPLIT:
            vals = [max(0.0, num(r[col])) for r in mine]  # 'other' can be a hair negative
            ax_split.bar(range(len(mine)), vals, bottom=bottom, label=label)
            bottom = [b + v for b, v in zip(bottom, vals)]
        for i, r in enumerate(mine):
            if r["oversubscribed"] == "1":
                ax_split.text(i, bottom[i], "over", ha="center", va="bottom", fontsize=7)
        ax_split.set_xticks(range(len(mine)))
        ax_split.set_xticklabels(labels, fontsize=7)
        ax_split.set_ylabel("ms per update (median)")
        ax_split.set_title("%s: time split per update (norm / ranks)" % mode, fontsize=9)
        ax_split.set_ylim(top=1.35 * max(bottom + [1e-3]))  # room for the legend
        ax_split.legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main():
    argv, extra = split_passthrough(sys.argv[1:])
    p = argparse.ArgumentParser(
        prog="pn bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pnbench", required=True, help="path of the pnbench executable")
    p.add_argument("--ranks", default="1,2,4", help="rank counts (1 is added when missing)")
    p.add_argument("--norms", default="layer,sync_batch,power",
                   help="norms, comma-separated (pntrain --list-norms names them)")
    p.add_argument("--group-sizes", default="world",
                   help="sync group sizes of the synchronized norms: numbers and 'world' (all "
                        "ranks); those that do not divide a rank count are skipped there")
    p.add_argument("--modes", default="strong,weak", help="strong, weak or both")
    p.add_argument("--tokens", type=int, default=2048,
                   help="tokens per micro-step: over all ranks (strong) or per rank (weak)")
    p.add_argument("--warmup", type=int, default=3, help="updates before the measured ones")
    p.add_argument("--measure", type=int, default=10, help="measured updates (medians)")
    p.add_argument("--config", default=os.path.join(ROOT, "configs", "default.ini"),
                   help="pntrain INI file (default configs/default.ini)")
    p.add_argument("--out", default="pnbench_out", help="output directory")
    p.add_argument("--cores", type=int, default=os.cpu_count() or 1,
                   help="cores of the machine (default: all online)")
    p.add_argument("--mpirun-args", default="",
                   help="extra mpirun flags, e.g. '--hostfile hosts --map-by ppr:1:node' to "
                        "spread the ranks over nodes (pnbench sets the threads per rank from "
                        "its own node: cores / ranks there)")
    a = p.parse_args(argv)

    try:
        ranks = int_list(a.ranks, "--ranks")
    except ValueError as e:
        die(str(e))
    if 1 not in ranks:
        print("bench: adding 1 rank to --ranks: it is the efficiency baseline")
        ranks.append(1)
    ranks = sorted(set(ranks))
    norms = [n for n in a.norms.split(",") if n]
    for item in a.group_sizes.split(","):
        if item != "world" and not (item.isdigit() and int(item) > 0):
            die("--group-sizes: '%s' is neither a positive number nor 'world'" % item)
    modes = [m for m in a.modes.split(",") if m]
    for m in modes:
        if m not in ("strong", "weak"):
            die("unknown mode '%s' in --modes: give strong, weak or strong,weak" % m)
    if "strong" in modes:
        for r in ranks:
            if a.tokens % r:
                die("--tokens %d is not divisible by %d ranks (strong scaling splits it): give a "
                    "multiple of every rank count" % (a.tokens, r))
    if not os.access(a.pnbench, os.X_OK):
        die("no pnbench at '%s': build it (launcher/pn build, or make pnbench)" % a.pnbench)
    known = known_norms(a.pnbench)
    for n in norms:
        if n not in known:
            die("unknown norm '%s' in --norms: choose from %s" % (n, ", ".join(known)))
    if not os.path.isfile(a.config):
        die("no config file '%s' (--config)" % a.config)
    os.makedirs(a.out, exist_ok=True)
    csv_path = os.path.join(a.out, "bench.csv")
    if os.path.exists(csv_path):
        os.remove(csv_path)  # efficiencies refer to the 1-rank rows of this run only
    over = [r for r in ranks if r > a.cores]
    if over:
        print("bench: %s ranks exceed the %d cores: they run oversubscribed; their timings "
              "only show that it runs, they are not scaling figures" %
              (",".join(map(str, over)), a.cores))

    failed = []
    for mode in modes:
        for norm in norms:
            for r, k in [(r, k) for r in ranks
                         for k in (group_sizes(a.group_sizes, r) if norm.startswith("sync_")
                                   else [None])]:
                cmd = mpirun_cmd(r, a.cores, a.mpirun_args) + [
                    a.pnbench, "--mode", mode, "--tokens", str(a.tokens), "--warmup",
                    str(a.warmup), "--measure", str(a.measure), "--csv", csv_path, "--config",
                    a.config, "--norm", norm] + \
                    (["--sync-group-size", str(k)] if k else []) + extra
                log = os.path.join(a.out, "%s_%s_np%d%s.log" % (mode, norm, r,
                                                                "_k%d" % k if k else ""))
                with open(log, "w") as f:
                    f.write(" ".join(cmd) + "\n")
                    f.flush()
                    rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
                summary = [l for l in open(log) if l.startswith("pnbench |")]
                if rc != 0 or not summary:
                    failed.append(log)
                    tail = open(log).read().splitlines()[-5:]
                    print("bench: %s %s at %d ranks failed (exit %d), see %s:\n  %s" %
                          (mode, norm, r, rc, log, "\n  ".join(tail)), file=sys.stderr)
                else:
                    print("".join(summary).rstrip())
    if not os.path.exists(csv_path):
        die("no run succeeded; see the logs in %s" % a.out)
    rows = list(csv.DictReader(open(csv_path)))
    print("bench: wrote %s (%d rows)" % (csv_path, len(rows)))
    png = os.path.join(a.out, "bench.png")
    if write_png(rows, png):
        print("bench: wrote %s" % png)
    else:
        print("bench: matplotlib is missing, so %s was skipped; install it with "
              "`apt-get install python3-matplotlib` and run the same command again" % png)
    if failed:
        die("%d run(s) failed: %s" % (len(failed), ", ".join(failed)))


if __name__ == "__main__":
    main()
