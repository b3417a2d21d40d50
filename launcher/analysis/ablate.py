#!/usr/bin/env python3
"""The batch-size ablation of the PowerNorm paper (Figure 5), run with pntrain.

For every norm and every statistics mini-batch m (tokens), one pntrain run with
    --norm NORM --max-tokens m/ranks --update-freq update_tokens/m
so every cell makes the same update of update_tokens tokens from the same seed and data, for
the same number of updates; only the mini-batch the norm's statistics see changes. With --ghost
a cell runs one micro-batch of update_tokens/ranks tokens per rank with ghost statistics
(--stats-batch-tokens m/ranks) instead: the same statistics batches in the same order
(tests/test_ghost_stats.cpp), with the rest of the model on large matrices. Cells run one
after the other (under mpirun when --ranks > 1). A cell whose metrics file already ends in its
final validation line (and was run with the same command) is skipped, so an interrupted
ablation resumes where it stopped.

--task translation runs the grid on IWSLT'14 (--arch transformer configs): the norm varies in
the encoder's places (the decoder keeps the config's LayerNorm, as in the paper), and after
training each cell translates the gen subset with beam search from its last checkpoint
(eval.log, bleu.txt); BLEU is the cell's metric.

Writes OUT/<norm>_m<m>/{metrics.jsonl,train.log,cmd.txt}, OUT/ablation.csv and, when
matplotlib is installed, OUT/ablation.png (valid perplexity, or BLEU for translation, over the
mini-batch, one line per norm).

Usage: ablate.py --pntrain BUILD/bin/pntrain [--quick|--full] [--norms layer,batch,power_v,power]
                 [--mini-batches 512,1024,2048,4096] [--update-tokens 4096] [--ranks 1]
                 [--ghost] [--task lm|translation] [--beam 5] [--gen-sentences N]
                 [--out DIR] [-- extra pntrain flags]
"""
import argparse
import csv
import hashlib
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from pn_metrics import int_list, read_metrics, run_with_progress, split_passthrough

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IWSLT = os.path.join(ROOT, "..", "shared", "data", "iwslt14-de-en")
PRESETS = {
    # (task, name): (config, data directory or None to keep the config's, sentences to
    # translate for BLEU (translation; 0 = all))
    ("lm", "quick"): (os.path.join(ROOT, "configs", "ablate_quick.ini"), None, 0),
    ("lm", "full"): (os.path.join(ROOT, "configs", "ablate_ptb.ini"),
                     os.path.join(ROOT, "..", "shared", "data", "ptb"), 0),
    ("translation", "quick"): (os.path.join(ROOT, "configs", "ablate_iwslt_quick.ini"), IWSLT,
                               300),
    ("translation", "full"): (os.path.join(ROOT, "configs", "iwslt_small.ini"), IWSLT, 0),
}
CSV_FIELDS = ["norm", "mini_batch", "update_freq", "stats_groups", "ranks", "valid_loss",
              "valid_ppl", "bleu", "tokens_per_s_median"]
# The norm a translation cell varies: the encoder's (the paper's setting; the decoder keeps
# the config's, LayerNorm).
ENCODER_NORM_FLAGS = ["--encoder-norm-self", "--encoder-norm-ff", "--encoder-norm-final"]


def die(msg):
    print("ablate: error: " + msg, file=sys.stderr)
    sys.exit(2)


def ini_settings(path):
    """The lines of a pntrain INI file as Boost's parser reads them, in file order: '#' to the
    line's end is a comment, blank lines and the blanks around a key and its value do not count;
    a key = value line comes as (key, value), any other line as (line, None)."""
    settings = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if "=" in line:
                k, v = line.split("=", 1)
                settings.append((k.strip(), v.strip()))
            elif line:
                settings.append((line, None))
    return settings


def read_ini(path):
    """The key = value lines of a pntrain INI file (no sections)."""
    return {k: v for k, v in ini_settings(path) if v is not None}


def flag_value(extra, name, default):
    """The last value of --name in the extra flags (both '--name V' and '--name=V'), else default."""
    val = default
    for i, a in enumerate(extra):
        if a == "--" + name and i + 1 < len(extra):
            val = extra[i + 1]
        elif a.startswith("--" + name + "="):
            val = a.split("=", 1)[1]
    return val


def mpirun_prefix(ranks):
    if ranks <= 1:
        return []
    cmd = ["mpirun", "-np", str(ranks), "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if ranks > (os.cpu_count() or 1):
        cmd.append("--oversubscribe")
    return cmd


def config_settings_digest(path):
    """A digest of what pntrain reads from a config file (ini_settings), in file order."""
    text = "\n".join(k if v is None else k + "=" + v for k, v in ini_settings(path))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def command_text(words, out):
    """A command with its paths as placeholders, so that a clone elsewhere (with the cells
    committed or copied) recognises its cells."""
    return " ".join(words).replace(out, "<out>").replace(ROOT, "<root>").replace(
        os.path.normpath(os.path.join(ROOT, "..", "shared")), "<shared>")


def cell_command(words, config, out):
    """The command a cell records in its cmd.txt and is known by: command_text and the digest of
    the config's settings, so that a changed value runs the cell afresh while comments and
    spacing, which pntrain does not read, change nothing."""
    return command_text(words, out) + " <config settings sha256 %s>" % \
        config_settings_digest(config)


def same_command(cell_dir, cmd_text):
    """True when the cell's cmd.txt records cmd_text."""
    try:
        with open(os.path.join(cell_dir, "cmd.txt")) as f:
            return f.read().strip() == cmd_text
    except OSError:
        return False


def start_cell(cell_dir, cmd_text, same=None):
    """Readies cell_dir to train cmd_text: unless its files are the same command's (same; by
    default, whether its cmd.txt records cmd_text), they are removed first, as nothing of another
    command (metrics, checkpoints) may count or resume; then cmd.txt records cmd_text."""
    if not (same_command(cell_dir, cmd_text) if same is None else same):
        shutil.rmtree(cell_dir, ignore_errors=True)
    os.makedirs(cell_dir, exist_ok=True)
    with open(os.path.join(cell_dir, "cmd.txt"), "w") as f:
        f.write(cmd_text + "\n")


def finished(cell_dir, max_update, cmd_text):
    """True when the cell's metrics end in the validation of update max_update and the cell was
    run with the same command."""
    _, valids = read_metrics(os.path.join(cell_dir, "metrics.jsonl"))
    if not valids or int(valids[-1].get("update", -1)) != max_update:
        return False
    return same_command(cell_dir, cmd_text)


def read_bleu(cell_dir):
    """The BLEU score a translation cell's evaluation printed (bleu.txt), or None."""
    try:
        with open(os.path.join(cell_dir, "bleu.txt")) as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def evaluate_bleu(cmd, cell_dir):
    """Runs the cell's --eval-only command (beam search on the gen subset); writes bleu.txt
    from its 'BLEU = x' line. Returns the score or None."""
    with open(os.path.join(cell_dir, "eval.log"), "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    with open(os.path.join(cell_dir, "eval.log"), errors="replace") as f:
        found = re.findall(r"BLEU = ([0-9.]+)", f.read())
    if rc != 0 or not found:
        return None
    with open(os.path.join(cell_dir, "bleu.txt"), "w") as f:
        f.write(found[-1] + "\n")
    return float(found[-1])


def summarize(norm, m, uf, groups, ranks, cell_dir):
    updates, valids = read_metrics(os.path.join(cell_dir, "metrics.jsonl"))
    bleu = read_bleu(cell_dir)
    tps = [u["tokens_per_s"] for u in updates if isinstance(u.get("tokens_per_s"), (int, float))]
    v = valids[-1] if valids else {}
    return {
        "norm": norm, "mini_batch": m, "update_freq": uf, "stats_groups": groups, "ranks": ranks,
        "valid_loss": v.get("valid_loss", float("nan")),
        "valid_ppl": v.get("valid_ppl", float("nan")),
        "bleu": "" if bleu is None else bleu,
        "tokens_per_s_median": statistics.median(tps) if tps else float("nan"),
    }


def write_png(rows, path, title, metric="valid_ppl", label="validation perplexity"):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for norm in dict.fromkeys(r["norm"] for r in rows):
        pts = sorted((r["mini_batch"], r[metric]) for r in rows if r["norm"] == norm)
        pts = [(x, y) for x, y in pts if isinstance(y, float) and math.isfinite(y)]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=norm)
    ax.set_xscale("log", base=2)
    xs = sorted({r["mini_batch"] for r in rows})
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x) for x in xs])
    ax.set_xlabel("statistics mini-batch (tokens)")
    ax.set_ylabel(label)
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(title="norm")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main():
    argv, extra = split_passthrough(sys.argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pntrain", required=True, help="path of the built pntrain")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", dest="preset", action="store_const", const="quick",
                   help="lm: configs/ablate_quick.ini on the builtin corpus (default); "
                        "translation: configs/ablate_iwslt_quick.ini, BLEU on 300 sentences")
    g.add_argument("--full", dest="preset", action="store_const", const="full",
                   help="lm: configs/ablate_ptb.ini on ../shared/data/ptb; translation: "
                        "configs/iwslt_small.ini, BLEU on the whole gen subset")
    p.add_argument("--task", choices=["lm", "translation"], default="lm",
                   help="translation: the norm varies in the encoder (the decoder keeps the "
                        "config's), and each cell is scored by test BLEU after training")
    p.add_argument("--beam", type=int, default=5, help="translation: beam size for BLEU")
    p.add_argument("--gen-sentences", type=int, default=None,
                   help="translation: sentences translated for BLEU (0: all; default: preset)")
    p.add_argument("--config", help="INI file of every cell instead of the preset's")
    p.add_argument("--data", help="your own corpus directory instead of the preset's")
    p.add_argument("--norms", default="layer,batch,power_v,power")
    p.add_argument("--mini-batches", default="512,1024,2048,4096")
    p.add_argument("--update-tokens", type=int, default=4096)
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--ghost", action="store_true",
                   help="one micro-batch per update with ghost statistics groups of m tokens "
                        "instead of update-freq accumulation steps")
    p.add_argument("--out", default=None, help="output directory (default ablate_<preset>)")
    a = p.parse_args(argv)

    preset = a.preset or "quick"
    translation = a.task == "translation"
    config, data, gen_sentences = PRESETS[(a.task, preset)]
    if a.gen_sentences is not None:
        gen_sentences = a.gen_sentences
    if translation and a.ghost:
        die("--ghost is for the language model: pntrain --arch transformer has no ghost "
            "statistics")
    config = os.path.abspath(a.config or config)
    data = a.data or data
    out = os.path.abspath(a.out or "ablate_" + ("iwslt_" if translation else "") + preset)
    norms = [n.strip() for n in a.norms.split(",") if n.strip()]
    try:
        minis = int_list(a.mini_batches, "--mini-batches")
    except ValueError as e:
        die(str(e))
    U, R = a.update_tokens, a.ranks
    if not norms:
        die("--norms is empty")
    if U <= 0 or R <= 0:
        die("--update-tokens and --ranks must be positive")
    if not (os.path.isfile(a.pntrain) and os.access(a.pntrain, os.X_OK)):
        die("no pntrain executable at '%s': build it first (launcher/pn build)" % a.pntrain)
    if not os.path.isfile(config):
        die("no config file '%s'" % config)
    if data is not None and data != "builtin" and not os.path.isdir(data):
        die("no data directory '%s'" % data)
    if R > 1 and shutil.which("mpirun") is None:
        die("--ranks %d needs mpirun (apt-get install openmpi-bin)" % R)

    ini = read_ini(config)
    tps = int(flag_value(extra, "tokens-per-sample", ini.get("tokens-per-sample", "512")))
    max_update = int(flag_value(extra, "max-update", ini.get("max-update", "1000")))
    vint = int(flag_value(extra, "validate-interval-updates",
                          ini.get("validate-interval-updates", "200")))
    if vint <= 0:
        die("the ablation needs a validation: --validate-interval-updates must be positive")
    for m in minis:
        if U % m:
            die("mini-batch %d does not divide --update-tokens %d" % (m, U))
        if m % R:
            die("mini-batch %d is not divisible by --ranks %d" % (m, R))
        if not translation and (m // R) % tps:
            die("mini-batch %d / %d ranks = %d tokens per rank is not a multiple of "
                "tokens-per-sample %d" % (m, R, m // R, tps))
    for k in ("norm", "max-tokens", "update-freq", "stats-batch-tokens", "metrics", "save-dir",
              "encoder-norm-self", "encoder-norm-ff", "encoder-norm-final", "eval-only"):
        if flag_value(extra, k, None) is not None:
            die("--%s is set by the ablation; do not pass it after --" % k)

    os.makedirs(out, exist_ok=True)
    cells = [(n, m) for n in norms for m in minis]
    print("ablate: %d cells (%s x mini-batches %s), %d-token updates, %d rank(s), %d updates, "
          "config %s, data %s -> %s" % (len(cells), ",".join(norms),
                                        ",".join(map(str, minis)), U, R, max_update,
                                        os.path.relpath(config), data or ini.get("data", "?"),
                                        out), flush=True)
    rows, failed = [], []
    t_all = time.time()
    for i, (norm, m) in enumerate(cells, 1):
        # Accumulation: update-freq micro-steps of m tokens; ghost: one micro-batch of U tokens
        # whose norms take statistics over groups of m.
        uf, groups = (1, U // m) if a.ghost else (U // m, 1)
        cell_dir = os.path.join(out, "%s_m%d%s" % (norm, m, "_ghost" if a.ghost else ""))
        os.makedirs(cell_dir, exist_ok=True)
        metrics = os.path.join(cell_dir, "metrics.jsonl")
        args = ["--config", config]
        if data is not None:
            args += ["--data", data]
        if translation:
            args += [x for flag in ENCODER_NORM_FLAGS for x in (flag, norm)]
            args += ["--save-dir", os.path.join(cell_dir, "checkpoints"), "--keep-last", "1"]
        else:
            args += ["--norm", norm]
        args += ["--max-tokens", str(m * groups // R), "--update-freq", str(uf)]
        if a.ghost:
            args += ["--stats-batch-tokens", str(m // R)]
        args += ["--metrics", metrics] + extra
        cmd = mpirun_prefix(R) + [os.path.abspath(a.pntrain)] + args
        cmd_text = cell_command(mpirun_prefix(R) + ["pntrain"] + args, config, out)
        # Translation: BLEU of beam search with the last checkpoint, after training.
        eval_cmd = cmd + ["--eval-only", "--beam", str(a.beam), "--remove-bpe",
                          "--gen-max-sentences", str(gen_sentences)]
        tag = "[%d/%d] norm %-8s mini-batch %5d (max-tokens %d x %d rank(s), update-freq %d%s)" % (
            i, len(cells), norm, m, m * groups // R, R, uf,
            ", %d ghost groups" % groups if a.ghost else "")
        if finished(cell_dir, max_update, cmd_text) and (
                not translation or read_bleu(cell_dir) is not None):
            row = summarize(norm, m, uf, groups, R, cell_dir)
            print("%s: done before, skipped: valid ppl %.3f%s" % (
                tag, row["valid_ppl"], " BLEU %s" % row["bleu"] if translation else ""),
                flush=True)
            rows.append(row)
            continue
        print("%s: running ..." % tag, flush=True)
        start_cell(cell_dir, cmd_text)
        t0 = time.time()
        rc = 0
        if not finished(cell_dir, max_update, cmd_text):  # translation: maybe only BLEU left
            rc = run_with_progress(cmd, os.path.join(cell_dir, "train.log"), tag)
        if translation and rc == 0 and finished(cell_dir, max_update, cmd_text):
            if evaluate_bleu(eval_cmd, cell_dir) is None:
                rc = -1
                print("%s: BLEU evaluation FAILED; see %s" % (tag, os.path.join(cell_dir, "eval.log")))
        secs = time.time() - t0
        row = summarize(norm, m, uf, groups, R, cell_dir)
        rows.append(row)
        if rc != 0 or not finished(cell_dir, max_update, cmd_text):
            failed.append((norm, m))
            print("%s: FAILED (exit %d) after %.1fs; last lines of %s:" % (
                tag, rc, secs, os.path.join(cell_dir, "train.log")), flush=True)
            with open(os.path.join(cell_dir, "train.log"), errors="replace") as f:
                for line in f.readlines()[-5:]:
                    print("    " + line.rstrip())
        else:
            print("%s: %.1fs: valid loss %.4f ppl %.3f%s, %.0f tok/s" % (
                tag, secs, row["valid_loss"], row["valid_ppl"],
                ", BLEU %.2f" % row["bleu"] if translation else "", row["tokens_per_s_median"]),
                flush=True)

    csv_path = os.path.join(out, "ablation.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("%.6g" % r[k] if isinstance(r[k], float) else r[k])
                        for k in CSV_FIELDS})
    print("ablate: %d cells in %.1fs; wrote %s" % (len(cells), time.time() - t_all, csv_path))
    png = os.path.join(out, "ablation.png")
    if translation:
        title = "BLEU vs encoder statistics mini-batch (%d-token updates, %d rank(s))" % (
            U, R)
        drawn = write_png(rows, png, title, "bleu", "BLEU (beam %d)" % a.beam)
    else:
        title = "valid ppl vs statistics mini-batch (%d-token updates, %d rank(s))" % (U, R)
        drawn = write_png(rows, png, title)
    if drawn:
        print("ablate: wrote %s" % png)
    else:
        print("ablate: matplotlib is missing, so %s was skipped; install it with "
              "`apt-get install python3-matplotlib` and run the same command again "
              "(finished cells are skipped)" % png)
    if failed:
        print("ablate: %d cell(s) failed: %s" % (len(failed), ", ".join(
            "%s m=%d" % c for c in failed)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
