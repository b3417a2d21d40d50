#!/usr/bin/env python3
"""Reproduces the PowerNorm paper's tables and figures with pntrain, on real data.

One command trains every cell, one after the other, and writes OUT/REPORT.md with its PNGs:
  Table 2 analog   LN, BN, PN-V, PN (paper) and PN (authors: their MaskPowerNorm behind their
                   group pre-scaling with G = heads), the same budget and seeds for each;
                   validation and test perplexity as mean and spread over seeds, next to the
                   paper's numbers (translation: held-out perplexity and BLEU).
  Figure 5 analog  the metric over statistics mini-batches at a fixed update size
                   (launcher/analysis/ablate.py underneath; ghost statistics for the LM).
  Figures 2-4      batch-vs-running statistic distances and gradient-part norms of BN, PN-V and
                   PN over training (--probe-norm-stats all in the table's first seed;
                   launcher/analysis/plot.py draws them).
  Figure 6 analog  singular values of the learned embedding matrix for LN and PN (read from
                   the first seed's checkpoints; numpy's SVD).
  PN's validation  the running psi^2 of every PN layer against the batch psi_B^2 over the
  during warmup    first updates (--probe-norm-stats of the paper PN run), which explains the
                   huge early validation perplexity of `power`.

Cells are resumable: a cell whose metrics end in its final validation, run with the same
command, and whose evaluation is on disk is skipped, so an interrupted run continues where it
stopped. Only the report is rewritten each time (from whatever cells are done).

Presets (--quick is the default):
  lm quick          configs/reproduce_quick_ptb.ini on ../shared/data/ptb, seeds 1,2;
                    ablation cells of 100 updates
  lm medium         configs/reproduce_medium_ptb.ini on ../shared/data/ptb, seed 1: every norm
                    until LN has flattened (at most 12 epochs, early stopping after 2 epochs
                    without gain), PN's alphas picked per variant over {0.9, 0.95, 0.99} on
                    short runs first; test perplexity of the best-validation checkpoint;
                    learning curves (figs/curves_medium.png); no Figure 5-6 cells. An
                    interrupted cell resumes from its last checkpoint
  lm long           configs/reproduce_long_ptb.ini: the medium recipe to the paper's 30 epochs
                    and its early stopping (5 epochs without gain), PN's alphas the medium
                    tuning's choice (0.9 for both variants, in the config); cells as medium's;
                    seeds 1-6 (six a norm: 80% power at a 1% difference)
  lm full           configs/paper_ptb.ini (the paper's recipe, a standard pre-norm
                    Transformer in place of the tensorized one), seeds 1-6
  translation quick configs/ablate_iwslt_quick.ini on the IWSLT'14 valid split, seeds 1,2
  translation full  configs/paper_iwslt14.ini (needs the IWSLT'14 train split)

Usage: reproduce.py --pntrain BUILD/bin/pntrain [--task lm|translation] [--quick|--medium|--long|--full]
                    [--seeds 1,2,3] [--device cpu|cuda] [--ranks 1] [--out DIR] [--data DIR]
                    [--norms LIST] [--config INI] [--dropouts LIST] [--no-ablation]
                    [--report-only] [--allow-mixed FIELD] [-- extra pntrain flags for every cell]

--dropouts LIST (medium, long) runs the dropout control instead of the table: --norms at each
dropout of the comma-separated list, the config's own value always added (the table's cell);
it writes OUT/DROPOUT.md. --data DIR takes train.txt, valid.txt and test.txt of your own
corpus; a report on a corpus that is not the paper's has no paper column. --allow-mixed FIELD
is repeatable; the report marks what was mixed.

Before the first cell a run writes its protocol into OUT/PLAN.json (PLAN_DROPOUT.json,
PLAN_FIGURE5.json): norms, seeds, grids, budget, the primary comparison, its family, the test
and the correction; the report quotes it with its sha256 digest and names cells it did not
list. Every report gives Welch's intervals, Holm's adjusted p over its declared family (each
norm against LN; each m against the largest m), paired tests by seed, the difference detectable
with 80% power and the cells capped by the budget, and writes OUT/report.json. It refuses to
pool cells whose provenance (commit, build, device, host: provenance.py) differs in anything
but the seed unless --allow-mixed names the field.
"""
import argparse
import hashlib
import json
import math
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import time

from ablate import cell_command, command_text, finished, flag_value, mpirun_prefix, read_ini, \
    same_command, start_cell
from pn_metrics import int_list, read_metrics, read_records, registry_norms, \
    run_with_progress, split_passthrough
import provenance
from seed_stats import capped, compare, describe_difference, family, fmt_p, mean_sd, \
    strength, welch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(ROOT, "..", "shared", "data")
PRESETS = {
    # (task, preset): config, data directory (None: the config's), ablation mini-batches,
    # ablation norms, BLEU sentences (translation; 0 = all), default seeds, updates of an
    # ablation cell (None: the config's)
    ("lm", "quick"): ("reproduce_quick_ptb.ini", os.path.join(DATA, "ptb"), "512,1024,2048,4096",
                      "batch,power", 0, "1,2", 100),
    ("lm", "medium"): ("reproduce_medium_ptb.ini", os.path.join(DATA, "ptb"), None, None, 0,
                       "1", None),
    ("lm", "long"): ("reproduce_long_ptb.ini", os.path.join(DATA, "ptb"), None, None, 0,
                     "1,2,3,4,5,6", None),
    ("lm", "full"): ("paper_ptb.ini", os.path.join(DATA, "ptb"), "512,1024,2048,4096",
                     "layer,batch,power_v,power", 0, "1,2,3,4,5,6", None),
    ("translation", "quick"): ("ablate_iwslt_quick.ini", os.path.join(DATA, "iwslt14-de-en"),
                               "1024,2048,4096", "batch,power", 300, "1,2", None),
    ("translation", "full"): ("paper_iwslt14.ini", os.path.join(DATA, "iwslt14-de-en"),
                              "512,1024,2048,4096", "layer,batch,power_v,power", 0,
                              "1,2,3,4,5,6", None),
}
# The paper's numbers: Table 2 (PTB test perplexity) and Table 1 (IWSLT'14 BLEU).
PAPER = {
    "lm": {"layer": 53.2, "batch": 60.7, "power_v": 55.3, "power": 47.6},
    "translation": {"layer": 35.5, "batch": 34.4, "power": 35.9},
}
# The medium preset's grid of PN momenta (the paper's: alpha_fwd = alpha_bkw from it) and the
# length of each short tuning run (1.5 epochs of PTB: 140 updates past PN's 200-update warmup).
ALPHA_GRID = ("0.9", "0.95", "0.99")
TUNE_UPDATES = 340
# The seed of the tuning runs: one choice per PN variant, whichever --seeds a run trains.
TUNE_SEED = 1
# The presets whose cells train to --max-epoch or early stopping and resume from a checkpoint.
EPOCH_PRESETS = ("medium", "long")
ENCODER_NORM_FLAGS = ["--encoder-norm-self", "--encoder-norm-ff", "--encoder-norm-final"]


def variants(heads):
    """The Table 2 rows: (key, label, norm, extra flags, paper key)."""
    return [
        ("layer", "LN", "layer", [], "layer"),
        ("batch", "BN", "batch", [], "batch"),
        ("power_v", "PN-V", "power_v", [], "power_v"),
        ("power", "PN (paper)", "power", ["--pn-variant", "paper"], "power"),
        ("power_authors", "PN (authors, pre-scaling G=%d)" % heads, "power",
         ["--pn-variant", "authors", "--norm-prescale-groups", str(heads)], "power"),
    ]


def die(msg):
    print("reproduce: error: " + msg, file=sys.stderr)
    sys.exit(2)


def known_norms(pntrain):
    """The norm names of pntrain's registry, [] where it cannot say."""
    try:
        return registry_norms(pntrain)
    except (OSError, ValueError, subprocess.CalledProcessError):
        return []


def run_logged(cmd, log_path, mode="w", tag=None):
    """cmd's output into log_path; with a tag, its progress every PN_PROGRESS_S seconds."""
    if tag:
        return run_with_progress(cmd, log_path, tag, mode)
    with open(log_path, mode) as log:
        return subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)


def updates_wall_s(metrics_path):
    """Seconds of the training updates in a metrics file (validation and saving excluded)."""
    updates, _ = read_metrics(metrics_path)
    return sum(u.get("wall_s", 0.0) for u in updates if "time" in u)


# ---- checkpoints (trainer/checkpoint.h: magic, header length, JSON header, payload, CRC) ----
def read_checkpoint_params(model_bin):
    """{name: (shape, flat float32 list as numpy array)} of a pntrain model.bin."""
    import numpy as np
    with open(model_bin, "rb") as f:
        blob = f.read()
    if blob[:8] != b"PNCKPT01":
        raise ValueError("%s is not a pntrain checkpoint" % model_bin)
    (hlen,) = struct.unpack_from("<Q", blob, 8)
    header = json.loads(blob[16:16 + hlen])
    payload = np.frombuffer(blob, dtype="<f4", offset=24 + hlen)
    out, at = {}, 0
    for p in header["params"]:
        n = int(np.prod(p["shape"]))
        out[p["name"]] = payload[at:at + n].reshape(p["shape"])
        at += n
    return out


def last_checkpoint_dir(save_dir):
    """The newest complete checkpoint_<update> directory under save_dir, or None."""
    best, best_u = None, -1
    if not os.path.isdir(save_dir):
        return None
    for name in os.listdir(save_dir):
        m = re.fullmatch(r"checkpoint_(\d+)", name)
        if m and os.path.exists(os.path.join(save_dir, name, "DONE")) and int(m.group(1)) > best_u:
            best, best_u = os.path.join(save_dir, name), int(m.group(1))
    return best


# ---- statistics (launcher/analysis/seed_stats.py), provenance, the plan, report.json ----
class Refused(Exception):
    """A report over cells whose provenance differs (provenance.check_pool's line)."""


NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven",
                8: "eight", 9: "nine", 10: "ten", 11: "eleven", 12: "twelve"}


def words(n):
    return NUMBER_WORDS.get(n, str(n))


def pool(a, cells):
    """provenance.check_pool over [(name, cell_dir)] with --allow-mixed; Refused on a refusal."""
    try:
        return provenance.check_pool(cells, a.allow_mixed, "reproduce")
    except SystemExit:
        raise Refused("reproduce: the report's cells differ in provenance (the line above)")


def corpus_of(runner):
    """The corpus name of a run: the data directory's name ('builtin' for the builtin one)."""
    d = runner.data or runner.ini.get("data") or "builtin"
    return "builtin" if d == "builtin" else os.path.basename(os.path.normpath(d)).lower()


def paper_numbers(runner, task):
    """The paper's numbers where the corpus is the paper's (PTB, IWSLT'14), else None."""
    corpus = corpus_of(runner)
    if (task == "lm" and corpus == "ptb") or (task == "translation" and corpus.startswith("iwslt14")):
        return PAPER[task]
    return None


def budget_words(a, runner):
    if a.preset in EPOCH_PRESETS:
        return "At %s epochs" % runner.ini.get("max-epoch")
    return "At %d updates" % runner.max_update


def device_words(pooled, a):
    dev = pooled["fields"]["device"] if pooled else a.device
    hw = {"cpu": "the CPU", "cuda": "the GPU"}.get(dev, "devices %s" % dev)
    if dev == "cuda" and pooled and pooled["fields"]["gpu_name"] not in ("unknown", "mixed"):
        hw = "the GPU (%s)" % pooled["fields"]["gpu_name"]
    if pooled and pooled["mixed"]:
        def vals(f):  # the values where they are short, else their count
            v = ", ".join(sorted(pooled["values"][f]))
            return v if len(v) <= 40 else "%d values" % len(pooled["values"][f])
        hw += ", cells pooled across differing %s" % ", ".join(
            "%s (%s)" % (f, vals(f)) for f in pooled["mixed"])
    return hw


def run_family(groups, ref, keys):
    """[(key, ref, compare())] of each key's {seed: value} against ref's, with Holm's adjusted p
    over them all (one family)."""
    comps = [(k, ref, compare(groups[k], groups[ref])) for k in keys
             if k != ref and k in groups and ref in groups]
    family([c for _, _, c in comps])
    return comps


def comparison_json(key, ref, c):
    w = c["welch"]
    r = lambda x, d=4: None if x is None else round(x, d)
    return {"group": key, "reference": ref, "diff": r(c["diff"]), "diff_pct": r(c["diff_pct"], 2),
            "ci95": [r(w["lo"]), r(w["hi"])] if w else None, "p": r(w["p"]) if w else None,
            "p_adj": r(c["p_adj"]), "paired_p": r(c["paired"]["p"]) if c["paired"] else None,
            "detectable_80": r(c["detectable"])}


def stat_cells(c):
    """'| CI | p | Holm p | paired p | detectable |' of a comparison."""
    w = c["welch"]
    if w is None:
        return "— | — | — | — | — |"
    return "[%+.2f, %+.2f] | %s | %s | %s | %.2f |" % (
        w["lo"], w["hi"], fmt_p(w["p"]), fmt_p(c["p_adj"]),
        fmt_p(c["paired"]["p"]) if c["paired"] else "—", c["detectable"])


def finding(prefix, label, ref_label, c, n_family, family_words, seeds, where):
    """A finding at the strength its family-wise test gives, e.g. 'At 30 epochs PN (paper)
    tests 1.3% below LN, p 0.033 uncorrected, 0.098 after Holm over four norms: suggestive,
    not established with three seeds (seeds 1,2,3, on the CPU).'"""
    w = c["welch"]
    if w is None or c["diff_pct"] is None:
        return "%s %s has fewer than 2 seeds on a side against %s: no test (%s)." % (
            prefix, label, ref_label, where)
    pct = c["diff_pct"]
    text = "%s %s tests %.1f%% %s %s, p %s uncorrected" % (
        prefix, label, abs(pct), "below" if pct < 0 else "above", ref_label, fmt_p(w["p"]))
    if n_family > 1:
        text += ", %s after Holm over %s" % (fmt_p(c["p_adj"]), family_words)
    st = strength(c, n_family).replace("with %d seeds" % w["na"], "with %s seeds" % words(
        w["na"])).replace("Holm over %d" % n_family, "Holm")
    return text + ": %s (seeds %s, on %s)." % (st, seeds, where)


def capped_note(rows, labels, marked=True):
    """The line naming the cells whose best validation is their last evaluation."""
    hit = ["%s seed %d" % (labels.get(r["key"], r["key"]), r["seed"]) for r in rows
           if r.get("capped")]
    if not hit:
        return []
    return ["", "Capped%s: the best validation of %s is its last evaluation: the budget "
            "stopped it while it still improved, so its figure is an upper bound of what the norm "
            "reaches." % (" (marked *)" if marked else "", ", ".join(hit))]


def test_source_note(rows):
    """Where the test perplexities come from."""
    old = [r for r in rows if r.get("test_source") == "eval.json"]
    if not old:
        return []
    return ["", "Test perplexity from each cell's eval.json (the evaluation's own record) for "
            "%d cell(s) whose metrics.jsonl holds no test record (run before pntrain wrote one; "
            "their committed logs are left as the runs wrote them)." % len(old)]


def plan_path(a, kind):
    return os.path.join(a.out, {"table": "PLAN.json", "dropout": "PLAN_DROPOUT.json",
                                "figure5": "PLAN_FIGURE5.json"}[kind])


def write_plan(a, runner, kind, norms, grids, primary, family_name):
    """The protocol, declared before the first cell: norms, seeds, grids, budget, the primary
    comparison, the family, the test and the correction, in OUT/PLAN*.json. An existing plan
    of other content is kept beside it as PLAN*.<digest>.json."""
    plan = {"schema": 1, "kind": kind, "task": a.task, "preset": a.preset,
            "config": os.path.relpath(runner.config, ROOT),
            "data": runner.data if runner.data in (None, "builtin") else
            os.path.relpath(runner.data, ROOT), "device": a.device, "ranks": a.ranks,
            "norms": norms, "seeds": runner.seeds, "grids": grids,
            "budget": ("max-epoch %s, patience %s" % (runner.ini.get("max-epoch"),
                                                       runner.ini.get("patience"))
                       if a.preset in EPOCH_PRESETS else "%d updates" % runner.max_update),
            "extra_flags": runner.extra, "metric": "test_ppl at each seed's best validation",
            "primary": primary, "family": family_name,
            "test": "Welch's two-sided t-test, 95% interval (scipy); paired t over shared seeds",
            "correction": "holm (statsmodels multipletests)", "alpha": 0.05}
    path = plan_path(a, kind)
    text = json.dumps(plan, indent=1, sort_keys=True) + "\n"
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
        if old == text:
            return path
        digest = hashlib.sha256(old.encode()).hexdigest()[:12]
        os.replace(path, path[:-5] + ".%s.json" % digest)
    with open(path, "w") as f:
        f.write(text)
    return path


def read_plan(a, kind):
    """(plan, 'sha256:...') of the folder's plan, or (None, None)."""
    try:
        with open(plan_path(a, kind), "rb") as f:
            blob = f.read()
        return json.loads(blob), "sha256:" + hashlib.sha256(blob).hexdigest()
    except (OSError, ValueError):
        return None, None


def plan_lines(a, kind, cells):
    """Markdown quoting the plan and its digest, and naming the cells it did not list: cells
    [(norm, seed, grid value or None)]."""
    plan, digest = read_plan(a, kind)
    name = os.path.basename(plan_path(a, kind))
    if plan is None:
        return ["", "## Protocol", "", "No %s: these cells ran before the reproduction wrote its "
                "plan first, so no protocol was declared before they ran; the family and test "
                "of this report are the report's own." % name], None
    L = ["", "## Protocol", "", "Declared before the first cell in `%s` (%s):" % (name, digest),
         "", "```", json.dumps(plan, indent=1, sort_keys=True), "```"]
    grid = plan.get("grids", {}).get("dropouts") or plan.get("grids", {}).get("mini_batches")
    outside = ["%s seed %d%s" % (k, s, "" if g is None else " at %s" % g) for k, s, g in cells
               if k not in plan["norms"] or s not in plan["seeds"] or
               (g is not None and grid and str(g) not in [str(x) for x in grid])]
    if outside:
        L += ["", "**Cells the plan did not list** (reported beside it, not part of the declared "
              "protocol): %s." % ", ".join(outside)]
    return L, {"file": name, "digest": digest}


def tuning_lines(a, runner, labels):
    """What was tuned for which norm, over which grid and seeds (or that nothing was)."""
    alpha = flag_value(runner.extra, "pn-alpha-fwd", None)
    if alpha is not None:
        what = ("PN's momenta set by the extra flags (alpha_fwd %s, alpha_bkw %s), not tuned "
                "here" % (alpha, flag_value(runner.extra, "pn-alpha-bkw", alpha)))
    elif a.no_tune:
        what = ("PN's momenta from the config (alpha_fwd %s, alpha_bkw %s)%s, not tuned in this "
                "run" % (runner.ini.get("pn-alpha-fwd"), runner.ini.get("pn-alpha-bkw"),
                         ": the medium preset's choice on its short runs" if a.preset == "long"
                         else ""))
    else:
        what = ("PN's momenta (alpha_fwd = alpha_bkw) tuned for PN (paper) and PN (authors) "
                "over {%s} on seed %d, %d-update runs, by best validation" % (
                    ", ".join(ALPHA_GRID), TUNE_SEED, TUNE_UPDATES))
    return ["", "Tuning: %s. No other hyperparameter (learning rate, warmup, BN's momentum, "
            "label smoothing, weight decay) was tuned for any norm: every norm runs the "
            "config's." % what]


def report_dates(a, pooled):
    """[first, last] date of the pooled cells' attempts (their start records); for cells that
    have none, the dates of the commits that added their eval.json (when they were kept, not
    when they ran); ["unknown", "unknown"] outside a git tree."""
    times = pooled["times"] if pooled else []
    if times:
        return [times[0][:10], times[-1][:10]]
    try:
        out = subprocess.run(["git", "-C", a.out, "log", "--format=%cs", "--diff-filter=A",
                              "--", ":(glob)**/eval.json"], capture_output=True, text=True,
                             timeout=60).stdout
        ds = sorted(d for d in out.split() if re.fullmatch(r"\d{4}-\d{2}-\d{2}", d))
        if ds:
            return [ds[0], ds[-1]]
    except (OSError, subprocess.SubprocessError):
        pass
    return ["unknown", "unknown"]


def invocation_note(a):
    """' This report: --report-only --allow-mixed X.' for a rewritten report."""
    if not a.report_only:
        return ""
    return " This report rewritten from the cells on disk (`--report-only%s`)." % "".join(
        " --allow-mixed " + f for f in a.allow_mixed)


def write_report_json(a, runner, kind, title, groups, comps, family_name, findings, pooled,
                      plan, labels, paper, flags):
    """results/<run>/report.json (docs' schema, notes REPORT_JSON.md): the folder's main
    report; the dropout control and Figure 5 also write report_dropout.json and
    report_figure5.json, and the main one when the folder has no table report."""
    f = pooled["fields"] if pooled else {}
    hw = "unknown CPU" if f.get("cpu_model") in (None, "unknown") else f.get("cpu_model")
    if f.get("device") == "cuda":
        hw = f.get("gpu_name", "unknown GPU")
    dates = report_dates(a, pooled)
    r = lambda x: None if x is None else round(x, 4)
    out = {"schema": 1, "run": os.path.basename(os.path.normpath(a.out)), "title": title,
           "task": a.task, "budget": a.preset, "corpus": corpus_of(runner),
           "metric": "test_ppl" if a.task == "lm" else "bleu", "plan": plan,
           "provenance": {"commit": f.get("commit", "unknown"), "device": f.get("device", a.device),
                          "hardware": hw, "dates": dates,
                          "mixed": pooled["mixed"] if pooled else []},
           "groups": [{"key": k, "label": labels.get(k, k), "flags": flags.get(k, ""),
                       "n": len(g["values"]), "seeds": sorted(g["values"]),
                       "mean": r(mean_sd(list(g["values"].values()))[0]),
                       "sd": r(mean_sd(list(g["values"].values()))[1]),
                       "values": [r(g["values"][s]) for s in sorted(g["values"])],
                       "capped_seeds": g["capped"]} for k, g in groups],
           "families": [{"name": family_name, "reference": comps[0][1] if comps else None,
                         "correction": "holm",
                         "comparisons": [comparison_json(k, ref, c) for k, ref, c in comps]}],
           "findings": findings, "paper": paper}
    names = {"table": ["report.json"], "dropout": ["report_dropout.json"],
             "figure5": ["report_figure5.json"]}[kind]
    if kind != "table" and not os.path.exists(os.path.join(a.out, "REPORT.md")):
        names.append("report.json")
    for n in names:
        with open(os.path.join(a.out, n), "w") as fh:
            json.dump(out, fh, indent=1)
            fh.write("\n")


def fmt_ms(vals, digits=1):
    m, sd, n = mean_sd(vals)
    if m is None:
        return "—"
    if n == 1:
        return "%.*f (1 seed)" % (digits, m)
    return "%.*f ± %.*f (%d)" % (digits, m, digits, sd, n)


# ---- the cells ----
class Runner:
    def __init__(self, a, extra, config, data, translation, seeds):
        self.a, self.extra, self.config, self.data = a, extra, config, data
        self.seeds = seeds
        with open(config, "rb") as f:  # the former digest, of the bytes, still names its cells
            self.config_bytes_digest = hashlib.sha256(f.read()).hexdigest()[:16]
        self.translation = translation
        self.ini = read_ini(config)
        self.max_update = int(flag_value(extra, "max-update", self.ini.get("max-update", "1000")))

    def base_args(self, norm, norm_flags, seed, cell_dir, probe, overrides=()):
        args = ["--config", self.config]
        if self.data is not None:
            args += ["--data", self.data]
        if self.translation:
            args += [x for flag in ENCODER_NORM_FLAGS for x in (flag, norm)]
        else:
            args += ["--norm", norm]
        args += norm_flags + ["--seed", str(seed)]
        args += ["--metrics", os.path.join(cell_dir, "metrics.jsonl"),
                 "--save-dir", os.path.join(cell_dir, "checkpoints"), "--keep-last", "1"]
        if probe:
            args += ["--probe-norm-stats", "all"]
        if self.a.device == "cuda":
            args += ["--device", "cuda"]
        return args + list(overrides) + self.extra

    def table_cell(self, key, norm, norm_flags, seed, probe, tag):
        """Trains one (variant, seed) cell and evaluates its last checkpoint; returns its row."""
        if self.a.preset in EPOCH_PRESETS:
            return self.medium_cell(key, norm, norm_flags, seed, tag)
        cell_dir = os.path.join(self.a.out, "table", "%s_s%d" % (key, seed))
        os.makedirs(cell_dir, exist_ok=True)
        args = self.base_args(norm, norm_flags, seed, cell_dir, probe)
        cmd = mpirun_prefix(self.a.ranks) + [self.a.pntrain] + args
        cmd_text = cell_command(mpirun_prefix(self.a.ranks) + ["pntrain"] + args, self.config,
                                self.a.out)
        eval_path = os.path.join(cell_dir, "eval.json")
        if finished(cell_dir, self.max_update, cmd_text) and os.path.exists(eval_path):
            print("%s: done before, skipped" % tag, flush=True)
            return self.row(key, seed, cell_dir)
        print("%s: running ..." % tag, flush=True)
        t0 = time.time()
        start_cell(cell_dir, cmd_text)
        rc = 0
        if not finished(cell_dir, self.max_update, cmd_text):
            # A quick cell starts over: an interrupted attempt's checkpoint is not resumed.
            shutil.rmtree(os.path.join(cell_dir, "checkpoints"), ignore_errors=True)
            rc = run_logged(cmd, os.path.join(cell_dir, "train.log"), tag=tag)
        train_s = time.time() - t0
        if rc == 0 and finished(cell_dir, self.max_update, cmd_text):
            rc = self.evaluate(cmd, cell_dir, train_s)
        if rc != 0:
            print("%s: FAILED (exit %d); see %s" % (tag, rc, cell_dir), flush=True)
            return self.row(key, seed, cell_dir)
        row = self.row(key, seed, cell_dir)
        print("%s: %.0fs: valid ppl %.2f test ppl %s%s" % (
            tag, time.time() - t0, row["valid_ppl"], "%.2f" % row["test_ppl"],
            " BLEU %.2f" % row["bleu"] if self.translation else ""), flush=True)
        return row

    # ---- the medium and long presets: cells that run to early stopping and resume ----
    def medium_cell(self, key, norm, norm_flags, seed, tag, cell_dir=None, probe=False,
                    overrides=()):
        """Trains one cell until --max-epoch or early stopping, resuming an interrupted run of
        the same command from its last checkpoint; evaluates checkpoint_best on valid and test.
        Default: the table's cell; a Figure 5 cell gives its own directory and overrides."""
        norm_flags = norm_flags + self.tuned_alpha(key, norm, norm_flags, seed)
        cell_dir = cell_dir or os.path.join(self.a.out, "table", "%s_s%d" % (key, seed))
        args = self.base_args(norm, norm_flags, seed, cell_dir, probe, overrides)
        rc = self.resumable_run(cell_dir, args, tag)
        eval_path = os.path.join(cell_dir, "eval.json")
        if rc == 0 and not os.path.exists(eval_path):
            best = os.path.join(cell_dir, "checkpoints", "checkpoint_best")
            with open(os.path.join(cell_dir, "trained.json")) as f:
                train_s = json.load(f)["train_s"]
            cmd = mpirun_prefix(self.a.ranks) + [self.a.pntrain] + args
            rc = self.evaluate(cmd + ["--restore-file", best], cell_dir, train_s)
        row = self.row(key, seed, cell_dir)
        if rc != 0:
            print("%s: FAILED (exit %d); see %s" % (tag, rc, cell_dir), flush=True)
        else:
            print("%s: best valid ppl %.2f (epoch %.1f), its test ppl %.2f, %.0f min" % (
                tag, row["valid_ppl"], row["best_epoch"], row["test_ppl"], row["train_s"] / 60),
                flush=True)
        return row

    def figure5_cell(self, key, norm, norm_flags, seed, m, tag):
        """One cell of the Figure 5 analog at an epoch preset's budget: statistics over
        mini-batches of m tokens by accumulation at a fixed update (--max-tokens m, --update-freq
        update/m), trained as the table's cells. BN is probed (--probe-norm-stats: the Figures
        2-4 distances); the unprobed m = update cell is the table's own cell, reused when done."""
        cell_dir, probe, table = self.figure5_dir(key, seed, m)
        if table:
            return self.medium_cell(key, norm, norm_flags, seed, tag)
        overrides = ["--max-tokens", str(m), "--update-freq", str(self.a.update_tokens // m)]
        return self.medium_cell(key, norm, norm_flags, seed, tag, cell_dir, probe, overrides)

    def figure5_dir(self, key, seed, m):
        """A Figure 5 cell's directory (the table's for an unprobed m = update when the table's
        update is that size), whether it is probed, and whether it is the table's."""
        probe = key == "batch"
        table_update = int(flag_value(self.extra, "max-tokens", self.ini.get("max-tokens", "0"))) * \
            int(flag_value(self.extra, "update-freq", self.ini.get("update-freq", "1")))
        if m == self.a.update_tokens == table_update and not probe:
            return os.path.join(self.a.out, "table", "%s_s%d" % (key, seed)), False, True
        return os.path.join(self.a.out, "figure5", "%s_m%d_s%d" % (key, m, seed)), probe, False

    def config_dropout(self):
        return self.ini.get("dropout", "0")

    def dropout_dir(self, key, seed, p):
        """A dropout cell's directory, and whether it is the table's own (p the config's)."""
        if float(p) == float(self.config_dropout()):
            return os.path.join(self.a.out, "table", "%s_s%d" % (key, seed)), True
        return os.path.join(self.a.out, "dropout", "%s_d%s_s%d" % (key, p, seed)), False

    def dropout_cell(self, key, norm, norm_flags, seed, p, tag):
        """One cell of the dropout control: the table's cell trained at dropout p (PN's alphas
        the variant's tuned ones, chosen at the config's dropout)."""
        cell_dir, table = self.dropout_dir(key, seed, p)
        if table:
            return self.medium_cell(key, norm, norm_flags, seed, tag)
        return self.medium_cell(key, norm, norm_flags, seed, tag, cell_dir,
                                overrides=["--dropout", p])

    def resumable_run(self, cell_dir, args, tag):
        """Runs pntrain with args into cell_dir unless trained.json says it finished: a cell
        run before with the same command continues from its last checkpoint, one of another
        command starts afresh. trained.json records the training seconds over every attempt."""
        prefix = mpirun_prefix(self.a.ranks)
        cmd = prefix + [self.a.pntrain] + args
        # A cell of another command or of a changed config value runs afresh, its directory
        # cleared first (start_cell); one recorded under the former digest of the config's
        # bytes is the same cell while those bytes are.
        words = prefix + ["pntrain"] + args
        cmd_text = cell_command(words, self.config, self.a.out)
        former = command_text(words, self.a.out) + " <config sha256 %s>" % self.config_bytes_digest
        trained = os.path.join(cell_dir, "trained.json")
        same = same_command(cell_dir, cmd_text) or same_command(cell_dir, former)
        if same and os.path.exists(trained):
            print("%s: done before, skipped" % tag, flush=True)
            return 0
        start_cell(cell_dir, cmd_text, same)
        print("%s: %s ..." % (tag, "resuming" if same else "running"), flush=True)
        t0 = time.time()
        rc = run_logged(cmd, os.path.join(cell_dir, "train.log"), "a", tag=tag)
        with open(os.path.join(cell_dir, "attempts.txt"), "a") as f:
            f.write("%.1f %d\n" % (time.time() - t0, rc))
        if rc == 0:
            with open(os.path.join(cell_dir, "attempts.txt")) as f:
                train_s = sum(float(line.split()[0]) for line in f if line.strip())
            # An attempt killed with the machine writes no line; the updates' own wall times
            # (metrics.jsonl, every attempt) then bound the training time from below.
            train_s = max(train_s, updates_wall_s(os.path.join(cell_dir, "metrics.jsonl")))
            with open(trained, "w") as f:
                json.dump({"train_s": train_s}, f)
        return rc

    def tuned_alpha(self, key, norm, norm_flags, seed):
        """The medium preset's PN momenta: alpha_fwd = alpha_bkw from ALPHA_GRID with the best
        validation perplexity of a short run each (TUNE_SEED, so that a run of other --seeds
        reuses the choice), decided once per variant and kept in tune/<key>.json; [] for the
        other norms or with --no-tune."""
        if norm != "power" or self.a.no_tune:
            return []
        overrides = []
        for flag, value in (("max-update", str(TUNE_UPDATES)), ("max-epoch", "0"),
                            ("patience", "0")):
            if flag_value(self.extra, flag, None) is None:
                overrides += ["--" + flag, value]
        scores = {}
        for alpha in ALPHA_GRID:
            d = os.path.join(self.a.out, "tune", "%s_a%s" % (key, alpha))
            flags = norm_flags + ["--pn-alpha-fwd", alpha, "--pn-alpha-bkw", alpha]
            rc = self.resumable_run(d, self.base_args(norm, flags, TUNE_SEED, d, False, overrides),
                                    "tune %s alpha %s" % (key, alpha))
            _, valids = read_metrics(os.path.join(d, "metrics.jsonl"))
            ppl = [v["valid_ppl"] for v in valids if isinstance(v.get("valid_ppl"), float)]
            if rc == 0 and ppl:
                scores[alpha] = min(ppl)
        if not scores:
            die("no tuning run of %s finished: see %s" % (key, os.path.join(self.a.out, "tune")))
        best = min(scores, key=lambda a_: scores[a_])
        updates = int(flag_value(self.extra, "max-update", TUNE_UPDATES))
        with open(os.path.join(self.a.out, "tune", "%s.json" % key), "w") as f:
            json.dump({"alpha": best, "best_valid_ppl": scores, "updates": updates}, f)
        return ["--pn-alpha-fwd", best, "--pn-alpha-bkw", best]

    def evaluate(self, cmd, cell_dir, train_s):
        ev = cmd + ["--eval-only"]
        if self.translation:
            ev += ["--beam", "5", "--remove-bpe", "--gen-max-sentences", str(self.a.gen_sentences)]
        log = os.path.join(cell_dir, "eval.log")
        rc = run_logged(ev, log)
        with open(log, errors="replace") as f:
            text = f.read()
        res = {"train_s": train_s}
        if self.translation:
            m = re.findall(r"valid loss ([0-9.]+) ppl ([0-9.e+]+)", text)
            b = re.findall(r"BLEU = ([0-9.]+)", text)
            if rc != 0 or not m or not b:
                return rc or 1
            res.update(valid_ppl=float(m[-1][1]), test_ppl=float(m[-1][1]), bleu=float(b[-1]))
        else:
            m = re.findall(r"valid loss [0-9.]+ ppl ([0-9.e+]+) \| test loss [0-9.]+ ppl "
                           r"([0-9.e+]+)", text)
            if rc != 0 or not m:
                return rc or 1
            res.update(valid_ppl=float(m[-1][0]), test_ppl=float(m[-1][1]))
        with open(os.path.join(cell_dir, "eval.json"), "w") as f:
            json.dump(res, f)
        return 0

    def row(self, key, seed, cell_dir):
        r = {"key": key, "seed": seed, "dir": cell_dir, "valid_ppl": float("nan"),
             "test_ppl": float("nan"), "bleu": float("nan"), "train_s": float("nan"),
             "best_epoch": float("nan"), "epochs": float("nan"), "updates": 0}
        try:
            with open(os.path.join(cell_dir, "eval.json")) as f:
                r.update(json.load(f))
        except (OSError, ValueError):
            pass
        r["test_source"] = "eval.json"
        tests = [t for t in read_records(os.path.join(cell_dir, "metrics.jsonl"))
                 if "test_ppl" in t and "event" not in t]
        if tests and isinstance(tests[-1].get("test_ppl"), (int, float)):
            r.update(test_ppl=tests[-1]["test_ppl"], test_source="metrics.jsonl")
        curve = learning_curve(cell_dir)
        if curve["valid"]:
            best = min(curve["valid"], key=lambda p: p[1])
            r.update(best_epoch=best[0] / curve["per_epoch"],
                     epochs=curve["valid"][-1][0] / curve["per_epoch"],
                     updates=curve["valid"][-1][0])
        # The best validation is the last evaluation: a finished cell the budget stopped
        # while it still improved (an early-stopped one ends past its best).
        r["capped"] = math.isfinite(r["test_ppl"]) and capped(curve["valid"], None)
        return r


def learning_curve(cell_dir):
    """A cell's validation perplexity and training nll by update, and its updates per epoch
    (from the progress lines of train.log; PTB at 4096 tokens: about 227)."""
    updates, valids = read_metrics(os.path.join(cell_dir, "metrics.jsonl"))
    per_epoch = float("nan")
    try:
        with open(os.path.join(cell_dir, "train.log"), errors="replace") as f:
            m = re.findall(r"update (\d+)/\d+ \| epoch ([0-9.]+)", f.read())
        u, e = max((int(a), float(b)) for a, b in m if float(b) > 0)
        per_epoch = u / e
    except (OSError, ValueError):
        pass
    return {"valid": [(v["update"], v["valid_ppl"]) for v in valids
                      if isinstance(v.get("valid_ppl"), float)],
            "train": [(u["update"], u["nll_loss"]) for u in updates
                      if isinstance(u.get("nll_loss"), float)],
            "per_epoch": per_epoch}


# ---- figures ----
def plt_or_none():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        return None


def embedding_spectra(cells):
    """{label: normalised singular values} of the embedding matrix of each given cell."""
    import numpy as np
    out = {}
    for label, cell_dir in cells:
        ck = last_checkpoint_dir(os.path.join(cell_dir, "checkpoints"))
        if not ck:
            continue
        params = read_checkpoint_params(os.path.join(ck, "model.bin"))
        name = next((n for n in params if n.endswith("embed_tokens.weight")), None)
        if name is None:
            continue
        s = np.linalg.svd(params[name].astype(np.float64), compute_uv=False)
        out[label] = s
    return out


def draw_spectra(spectra, path):
    plt = plt_or_none()
    if plt is None or not spectra:
        return False
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for label, s in spectra.items():
        ax.plot(range(1, len(s) + 1), s / s[0], label=label)
    ax.set_yscale("log")
    ax.set_xlabel("index")
    ax.set_ylabel("singular value / largest")
    ax.set_title("singular values of the learned embedding matrix", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return True


def warmup_probe(cell_dir, upto):
    """Per update of the first `upto` of a probed PN cell: {layer: psi2_ratio}, the mean over
    features of the running psi^2 (before the update: what inference would use) over the batch
    psi_B^2; and the cell's validation lines."""
    updates, valids = read_metrics(os.path.join(cell_dir, "metrics.jsonl"))
    rows = []
    for u in updates:
        if u.get("update", 0) > upto:
            break
        ns = u.get("norm_stats") or {}
        ratios = {k: v["psi2_ratio"] for k, v in ns.items() if "psi2_ratio" in v}
        if ratios:
            rows.append((u["update"], ratios))
    return rows, valids


def draw_warmup(rows_by_label, valids_by_label, warmup, path):
    """Left: per PN layer (a colour each) of each probed cell (a line style each), running
    psi^2 over batch psi_B^2 through the warmup; right: the first seed's validation perplexity.
    Legends beside the panels."""
    plt = plt_or_none()
    if plt is None or not rows_by_label:
        return False
    from matplotlib.lines import Line2D
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.4))
    styles = ["-", "--", ":"]
    layers = sorted({k for rows in rows_by_label.values() for _, r in rows for k in r})
    color = {layer: "C%d" % (j % 10) for j, layer in enumerate(layers)}
    for i, (label, rows) in enumerate(rows_by_label.items()):
        for layer in layers:
            pts = [(u, r[layer]) for u, r in rows if layer in r]
            if pts:
                a1.plot([p[0] for p in pts], [p[1] for p in pts], ls=styles[i % 3], lw=1.2,
                        color=color[layer])
    a1.axvline(warmup, color="grey", ls="--", lw=0.8)
    a1.axhline(1.0, color="black", lw=0.5)
    a1.set_yscale("log")
    a1.set_xlabel("update (dashed grey: end of warmup)")
    a1.set_ylabel("running psi^2 / batch psi_B^2 (mean over features)")
    a1.set_title("what inference divides by, against training", fontsize=10)
    a1.grid(True, alpha=0.3)
    handles = [Line2D([], [], color="none", label="layer (colour):")]
    handles += [Line2D([], [], color=color[layer], lw=2, label=layer) for layer in layers]
    handles += [Line2D([], [], color="none", label="cell (line style):")]
    handles += [Line2D([], [], color="black", ls=styles[i % 3], label=label)
                for i, label in enumerate(rows_by_label)]
    a1.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              frameon=False)
    for label, valids in valids_by_label.items():
        pts = [(v["update"], v["valid_ppl"]) for v in valids
               if isinstance(v.get("valid_ppl"), (int, float)) and math.isfinite(v["valid_ppl"])]
        if pts:
            a2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    a2.axvline(warmup, color="grey", ls="--", lw=0.8)
    a2.set_yscale("log")
    a2.set_xlabel("update")
    a2.set_ylabel("validation perplexity")
    a2.set_title("validation perplexity (first seed)", fontsize=10)
    a2.grid(True, alpha=0.3)
    a2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True


def figures(a, runner, rows, vlist, first_seed, extra):
    """Figures 2-4 (plot.py), 6 (embedding spectra) and PN's warmup from the first seed's
    finished cells: (spectra, warm, figs)."""
    figs = {}
    first = {r["key"]: r["dir"] for r in rows if r["seed"] == first_seed and
             math.isfinite(r["valid_ppl"])}
    probed = [os.path.join(first[k], "metrics.jsonl") for k in
              ("batch", "power_v", "power", "power_authors") if k in first]
    if probed and plt_or_none() is not None:
        subprocess.call([sys.executable, os.path.join(HERE, "plot.py")] + probed +
                        ["--out", os.path.join(a.out, "figs")], stdout=subprocess.DEVNULL)
        figs["norm_stats"] = os.path.exists(os.path.join(a.out, "figs", "norm_stats.png"))
    spectra = {}
    try:
        labels = {v[0]: v[1] for v in vlist}
        spectra = embedding_spectra([(labels[k], first[k]) for k in
                                     ("layer", "power", "power_authors", "batch")
                                     if k in first and k in labels])
        figs["spectra"] = draw_spectra(
            spectra, os.path.join(a.out, "figs", "embedding_singular_values.png"))
    except ImportError:
        print("reproduce: numpy is missing: no Figure 6 analog (apt-get install python3-numpy)")
    # PN's warmup: the probed PN cells' running-over-batch psi^2 over the first updates, and
    # the first seed's validation perplexities.
    warm = None
    W = int(flag_value(extra, "warmup-updates", runner.ini.get("warmup-updates", "100")))
    rows_w, valids_w = {}, {}
    for key, label, _, _, _ in vlist:
        if key not in first:
            continue
        r, v = warmup_probe(first[key], min(runner.max_update, 3 * W))
        valids_w[label] = v
        if r and key in ("power", "power_authors"):
            rows_w[label] = r
    if rows_w:
        warm = {"warmup": W, "rows": rows_w, "valids": valids_w}
        figs["warmup"] = draw_warmup(rows_w, valids_w, W,
                                     os.path.join(a.out, "figs", "pn_warmup.png"))
    return spectra, warm, figs


# ---- the report ----
def write_report(a, runner, rows, vlist, ablation, spectra, warm, figs, elapsed):
    L = []
    task = a.task
    L.append("# PowerNorm reproduction: %s, --%s" % (
        "language model" if task == "lm" else "translation", a.preset))
    L.append("")
    L.append("Config `%s`, data `%s`, seeds %s, %d rank(s), device %s, %d updates per cell. "
             "Generated by `launcher/pn reproduce` in %.0f min (this invocation)." % (
                 os.path.relpath(runner.config, ROOT),
                 os.path.relpath(runner.data, ROOT) if runner.data and runner.data != "builtin"
                 else runner.data or runner.ini.get("data"),
                 a.seeds, a.ranks, a.device, runner.max_update, elapsed / 60))
    if runner.extra:
        L.append("Extra pntrain flags: `%s`." % " ".join(runner.extra))
    done = [r for r in rows if math.isfinite(r["valid_ppl"])]
    pooled = pool(a, [(r["dir"], r["dir"]) for r in done])
    L += [""] + provenance.describe(pooled)
    L.append("")
    L.append("## Table 2 analog")
    L.append("")
    paper = paper_numbers(runner, task)
    pcol = " paper test ppl |" if task == "lm" else " paper BLEU |"
    if task == "lm":
        L.append("Perplexity after the cell's last update, mean ± sample standard deviation "
                 "(seeds). %s" % ("Paper: PTB test perplexity of its tensorized Transformer "
                                  "(Table 2)." if paper else "No paper column: the corpus (%s) "
                                  "is not the paper's PTB." % corpus_of(runner)))
        L.append("")
        L.append("| norm | valid ppl | test ppl |%s train min/cell (here) |" % (pcol if paper
                                                                              else ""))
    else:
        L.append("Held-out perplexity and BLEU (beam 5) after the last update, mean ± "
                 "sample standard deviation (seeds). %s" % (
                     "Paper: IWSLT'14 De-En BLEU (Table 1)." if paper else "No paper column: "
                     "the corpus (%s) is not the paper's IWSLT'14." % corpus_of(runner)))
        L.append("")
        L.append("| encoder norm | held-out ppl | BLEU |%s train min/cell (here) |" % (
            pcol if paper else ""))
    L.append("|---|---|---|---|" + ("---|" if paper else ""))
    by_key = {}
    for key, label, _, _, pkey in vlist:
        rs = [r for r in rows if r["key"] == key]
        by_key[key] = rs
        pv = paper.get(pkey) if paper and pkey else None
        if key == "power" and task == "lm":
            pv_text = "%.1f (PN)" % pv if pv else "—"
        elif key == "power_authors":
            pv_text = "(same PN)"
        else:
            pv_text = "%.1f" % pv if pv else "—"
        pv_cell = " %s |" % pv_text if paper else ""
        times = [r["train_s"] / 60 for r in rs if math.isfinite(r["train_s"])]
        ttext = "%.1f" % statistics.mean(times) if times else "—"
        if task == "lm":
            L.append("| %s | %s | %s |%s %s |" % (
                label, fmt_ms([r["valid_ppl"] for r in rs], 1),
                fmt_ms([r["test_ppl"] for r in rs], 1), pv_cell, ttext))
        else:
            L.append("| %s | %s | %s |%s %s |" % (
                label, fmt_ms([r["valid_ppl"] for r in rs], 2),
                fmt_ms([r["bleu"] for r in rs], 2), pv_cell, ttext))
    metric = "test_ppl" if task == "lm" else "bleu"
    lines, groups, comps, findings = seed_summary(
        a, runner, done, vlist, pooled, metric, "test ppl" if task == "lm" else "BLEU")
    L += lines
    plan_l, plan = plan_lines(a, "table", [(r["key"], r["seed"], None) for r in done])
    L += plan_l + tuning_lines(a, runner, {v[0]: v[1] for v in vlist})
    labels = {v[0]: v[1] for v in vlist}
    flags = {v[0]: " ".join(["--norm", v[2]] + v[3]) for v in vlist}
    write_report_json(a, runner, "table", "%s %s, --%s (%d updates)" % (
        corpus_of(runner), "LM" if task == "lm" else "translation", a.preset,
        runner.max_update), groups, comps, "each norm against LN", findings, pooled, plan,
        labels, paper, flags)
    if findings:
        L += ["", "## Findings", ""] + ["- " + x for x in findings]
    L.append("")
    L.append("Cells: `%s/table/<norm>_s<seed>/` (cmd.txt, train.log, metrics.jsonl, eval.log)." %
             os.path.basename(a.out))
    L.append("")

    L.append("## Figure 5 analog: statistics mini-batch")
    L.append("")
    if ablation is None:
        L.append("Not run (--no-ablation).")
    elif not ablation["rows"]:
        L.append("Not run yet: `launcher/analysis/ablate.py` runs after the table's cells (`%s`)." %
                 os.path.relpath(ablation["dir"], a.out))
        L.append("")
    else:
        L.append("`launcher/analysis/ablate.py %s` (seed of the config): the metric after the last "
                 "update for each norm and statistics mini-batch m at a fixed %s-token update%s." %
                 (" ".join(ablation["args"] + ablation["extra"]), ablation["update_tokens"],
                  " (ghost statistics: one micro-batch, statistics over groups of m tokens)"
                  if ablation["ghost"] else ""))
        L.append("")
        ms = sorted({int(r["mini_batch"]) for r in ablation["rows"]})
        col = "valid_ppl" if task == "lm" else "bleu"
        L.append("| norm | " + " | ".join("m=%d" % m for m in ms) + " |")
        L.append("|---|" + "---|" * len(ms))
        for norm in dict.fromkeys(r["norm"] for r in ablation["rows"]):
            cells = {int(r["mini_batch"]): r[col] for r in ablation["rows"] if r["norm"] == norm}
            L.append("| %s | " % norm + " | ".join(
                ("%.2f" % float(cells[m])) if m in cells and cells[m] not in ("", None) else "—"
                for m in ms) + " |")
        L.append("")
        if os.path.exists(os.path.join(ablation["dir"], "ablation.png")):
            L.append("![Figure 5 analog](%s/ablation.png)" % os.path.relpath(ablation["dir"], a.out))
            L.append("")

    L.append("## Figures 2 to 4 analog: batch vs running statistics, gradient parts")
    L.append("")
    if figs.get("norm_stats"):
        L.append("`--probe-norm-stats all` in the first seed's cells of BN, PN-V and PN "
                 "(`launcher/analysis/plot.py`): per layer, the distance of the batch statistic to the "
                 "running one (||stat_B − stat|| / d) and the RMS norm of the gradient part "
                 "through the statistic (BN: g_mu, g_sigma2; PN-V and PN: g_psi2).")
        L.append("")
        L.append("![Figures 2-4 analog](figs/norm_stats.png)")
        L.append("")
        L.append("![validation perplexity](figs/valid_ppl.png)")
    else:
        L.append("Not drawn yet (needs the first seed's BN, PN-V or PN cells and matplotlib).")
    L.append("")

    L.append("## Figure 6 analog: singular values of the embedding matrix")
    L.append("")
    if spectra:
        L.append("Singular values of `embed_tokens.weight` (tied input/output embedding) after "
                 "training, first seed, divided by the largest; the paper reports PN's as "
                 "better conditioned (a flatter spectrum) than LN's.")
        L.append("")
        L.append("| norm | sigma_max | sigma_min | sigma_max/sigma_min | sigma_max/sigma_10% |")
        L.append("|---|---|---|---|---|")
        for label, s in spectra.items():
            k = max(1, len(s) // 10)
            L.append("| %s | %.3f | %.4f | %.1f | %.2f |" % (
                label, s[0], s[-1], s[0] / max(s[-1], 1e-30), s[0] / s[k - 1]))
        L.append("")
        if figs.get("spectra"):
            L.append("![Figure 6 analog](figs/embedding_singular_values.png)")
    else:
        L.append("Not computed yet (needs the first seed's LN and PN checkpoints and numpy).")
    L.append("")

    L.append("## PN's validation during warmup")
    L.append("")
    if warm:
        W = warm["warmup"]
        L.append("`--pn-variant paper` (docs/contract.md) normalizes with the batch psi_B^2 during the first "
                 "W = %d updates while its running psi^2 is the cumulative mean of every psi_B^2 "
                 "since initialisation (psi^2 = 1 at t = 0); validation divides by the running "
                 "psi^2. The table gives, per PN layer of the probed first-seed cells, the mean "
                 "over features of running psi^2 / batch psi_B^2 (the running value before the "
                 "update, i.e. what a validation at that point uses): far below 1, validation "
                 "multiplies that layer's output by about 1/sqrt(ratio) relative to training." % W)
        L.append("")
        pick = sorted({1, 2, 5, 10, W // 4, W // 2, W, W + 1, W + 5, W + 20, 2 * W} - {0})
        for label, rows in warm["rows"].items():
            layers = sorted({k for _, r in rows for k in r})
            L.append("%s:" % label)
            L.append("")
            L.append("| update | " + " | ".join(layers) + " |")
            L.append("|---|" + "---|" * len(layers))
            for u in pick:
                hit = [r for uu, r in rows if uu == u]
                if hit:
                    L.append("| %d | " % u + " | ".join(
                        "%.3g" % hit[0][k] if k in hit[0] else "—" for k in layers) + " |")
            L.append("")
        vals = warm["valids"]
        us = sorted({v["update"] for vs in vals.values() for v in vs})
        if us:
            L.append("Validation perplexity of the first seed:")
            L.append("")
            L.append("| norm | " + " | ".join("update %d" % u for u in us) + " |")
            L.append("|---|" + "---|" * len(us))
            for label, vs in vals.items():
                by_u = {v["update"]: v.get("valid_ppl") for v in vs}
                L.append("| %s | " % label + " | ".join(
                    "%.4g" % by_u[u] if isinstance(by_u.get(u), (int, float)) else "—"
                    for u in us) + " |")
            L.append("")
        if figs.get("warmup"):
            L.append("![warmup](figs/pn_warmup.png)")
            L.append("")
    else:
        L.append("Not measured yet (needs the first seed's probed PN cells).")
    L.append("")
    path = os.path.join(a.out, "REPORT.md")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")
    return path


# One look per norm in every figure of the reports: colour, marker and line style by key.
NORM_STYLE = {"layer": ("C0", "x", "-"), "batch": ("C1", "s", "--"), "power_v": ("C2", "^", "-."),
              "power": ("C3", "o", "-"), "power_authors": ("C4", "D", ":")}


def seed_marks(ax, x, vals, color, marker):
    """Each seed's value at x as an open marker and, over two seeds or more, a bar over their
    range; returns their mean."""
    ax.plot([x] * len(vals), vals, ls="none", marker=marker, ms=5, mfc="white", color=color,
            alpha=0.8)
    if len(vals) > 1:
        ax.plot([x] * 2, [min(vals), max(vals)], color=color, lw=1, alpha=0.8)
    return sum(vals) / len(vals)


def draw_figure5(plt, by, ln, vlist, seeds, minis, U, preset, path):
    """The Figure 5 analog: test perplexity at the best validation against m, per norm a line
    through the mean over the seeds that have each m (their number in the legend), each seed's
    cell an open marker, a bar over the seeds' range, and LN's seeds as a band (m does not
    apply)."""
    labels = {v[0]: v[1] for v in vlist}
    keys = [v[0] for v in vlist if any(k == v[0] for k, _, _ in by)]
    fig, ax = plt.subplots(figsize=(9.6, 4.8))
    if ln:
        lo, hi = min(ln.values()), max(ln.values())
        mean = sum(ln.values()) / len(ln)
        ax.axhspan(lo - 0.02, hi + 0.02, color="C0", alpha=0.18, lw=0)
        ax.axhline(mean, color="C0", lw=1.4, label="LN (m not used): %s %s" % (
            "mean of seeds %s, range" % ",".join(map(str, sorted(ln))) if len(ln) > 1 else
            "seed %d" % next(iter(ln)), "%.2f-%.2f" % (lo, hi) if len(ln) > 1 else "%.2f" % lo))
    n = len(keys)
    for i, key in enumerate(keys):
        color, marker, ls = NORM_STYLE.get(key, ("C%d" % (i + 5), "o", "-"))
        shift = 2 ** (0.05 * (i - (n - 1) / 2))  # side by side at each m
        means, counts = [], []
        for m in minis:
            vals = [by[(key, s, m)]["test_ppl"] for s in seeds if (key, s, m) in by and
                    math.isfinite(by[(key, s, m)]["test_ppl"])]
            if not vals:
                continue
            means.append((m * shift, seed_marks(ax, m * shift, vals, color, marker)))
            counts.append(len(vals))
        if means:
            ax.plot([x for x, _ in means], [p for _, p in means], ls=ls, marker=marker,
                    color=color, ms=7, lw=1.6, label="%s: mean of %s seeds" % (
                        labels[key], "/".join(str(c) for c in counts)))
    ax.set_xscale("log", base=2)
    ax.set_xticks(minis)
    ax.set_xticklabels([str(m) for m in minis])
    ax.minorticks_off()
    ax.set_xlabel("statistics mini-batch m (tokens), every update %d tokens" % U)
    ax.set_ylabel("test perplexity at the best validation")
    ax.set_title("Figure 5 analog (%s budget): lower is better; filled: the mean over seeds, "
                 "open: each seed, bars: their range" % preset, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True


def spread(mean, sd, n):
    """'mean ± sd' over n seeds; the mean alone for one seed (it has no spread)."""
    return "%.2f ± %.2f" % (mean, sd) if n > 1 else "%.2f" % mean


def figure5_seed_summary(a, runner, by, vlist, minis, U, pooled):
    """Markdown lines: per norm and m below the update U, the test perplexity's mean and standard
    deviation over the seeds at m and at U, and their difference with Welch's 95% interval, p,
    Holm's adjusted p over the family of every m against m = U in this figure, the paired test
    and the detectable difference. Returns (lines, groups, comparisons, findings)."""
    labels = {v[0]: v[1] for v in vlist}
    g, groups, keys = {}, [], []
    for key in [v[0] for v in vlist]:
        for m in [mm for mm in minis if mm <= U]:
            cells = {s: r for (k, s, mm), r in by.items() if k == key and mm == m}
            if cells:
                name = "%s_m%d" % (key, m)
                g[name] = {s: r["test_ppl"] for s, r in cells.items()}
                groups.append((name, {"values": g[name],
                                      "capped": sorted(s for s, r in cells.items()
                                                       if r.get("capped"))}))
    comps = []
    for key in [v[0] for v in vlist]:
        comps += [(name, "%s_m%d" % (key, U), compare(g[name], g["%s_m%d" % (key, U)]))
                  for name in ["%s_m%d" % (key, m) for m in minis if m < U]
                  if name in g and "%s_m%d" % (key, U) in g]
    family([c for _, _, c in comps])
    n = len(comps)
    L = ["", "## Over seeds: each m against m = %d" % U, "",
         "Test perplexity at the best validation, mean ± sample standard deviation over the seeds "
         "that have the cell; the difference of the means with Welch's 95%% interval and p "
         "(scipy), Holm's adjusted p over the family declared here: every m against m = "
         "%d in this figure (%s comparison(s), one family); the paired test over shared seeds; "
         "the difference detectable with 80%% power. Positive: worse with the smaller "
         "statistics batch." % (U, words(n)), "",
         "| norm | m | seeds (m / %d) | test ppl at m | at m = %d | difference | 95%% CI | p | "
         "Holm p | paired p | detectable (80%%) | outside the interval? |" % (U, U),
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    texts, findings = [], []
    seeds = ",".join(map(str, sorted({s for (_, s, _) in by})))
    where = device_words(pooled, a)
    for name, ref, c in comps:
        key, m = name.rsplit("_m", 1)
        mv, sv, nv = mean_sd(list(g[name].values()))
        mr, sr, nr = mean_sd(list(g[ref].values()))
        diff = "%+.2f (%+.1f%%)" % (mv - mr, 100 * (mv / mr - 1))
        w = c["welch"]
        if w is None:
            tail = "— | — | — | — | — | fewer than 2 seeds on a side"
        else:
            tail = "%s %s" % (stat_cells(c), "yes: %s" % ("worse" if w["diff"] > 0 else "better")
                              if w["lo"] > 0 or w["hi"] < 0 else "no")
        L.append("| %s | %s | %d / %d | %s | %s | %s | %s |" % (
            labels[key], m, nv, nr, spread(mv, sv, nv), spread(mr, sr, nr), diff, tail))
        if w is not None:
            texts.append(describe_difference("%s at m = %s" % (labels[key], m),
                                             "at m = %d" % U, c, "test ppl", n))
        findings.append(finding(budget_words(a, runner), "%s at m = %s" % (labels[key], m),
                                "its m = %d" % U, c, n, "%s comparisons" % words(n), seeds,
                                where))
    if texts:
        L += ["", "In words:", ""] + ["- " + x for x in texts]
    return L, groups, comps, findings


def write_figure5_report(a, runner, rows, vlist, minis, elapsed):
    """FIGURE5.md of an epoch preset's Figure 5 cells: test perplexity at the best validation
    against the statistics mini-batch m, one line per norm with LN's table cell as the
    reference, and BN's batch-vs-running distances at the smallest and largest m."""
    labels = {v[0]: v[1] for v in vlist}
    U = a.update_tokens
    L = ["# PowerNorm reproduction: Figure 5 analog at the %s budget" % a.preset, "",
         "Config `%s`, seeds %s. Every update is %d tokens; batch-type norms take their "
         "statistics over micro-batches of m tokens (--max-tokens m --update-freq %d/m), trained "
         "as the table's cells (to --max-epoch %s or --patience %s). Test perplexity of the "
         "best-validation checkpoint (its valid perplexity in brackets). The m = %d cells of LN, "
         "PN-V and both PN forms are the table's own; BN's are probed (--probe-norm-stats all) "
         "and run apart. Generated by `launcher/pn reproduce --task lm --%s --figure5` (this "
         "invocation: %.0f min)." % (os.path.relpath(runner.config, ROOT), a.seeds, U, U,
                                     runner.ini.get("max-epoch"), runner.ini.get("patience"),
                                     U, a.preset, elapsed / 60) + invocation_note(a), "",
         "| norm | seed | " + " | ".join("m = %d" % m for m in minis) + " |",
         "|---|---|" + "---|" * len(minis)]
    by = {(r["key"], r["seed"], r["m"]): r for r in rows}
    for key, seed in sorted({(r["key"], r["seed"]) for r in rows},
                            key=lambda ks: ([v[0] for v in vlist].index(ks[0]), ks[1])):
        cells = []
        for m in minis:
            r = by.get((key, seed, m))
            cells.append("%.1f (%.1f)" % (r["test_ppl"], r["valid_ppl"])
                         if r and math.isfinite(r["test_ppl"]) else "—")
        L.append("| %s | %d | %s |" % (labels[key], seed, " | ".join(cells)))
    ln = {}
    for seed in runner.seeds:
        r = runner.row("layer", seed, os.path.join(a.out, "table", "layer_s%d" % seed))
        if math.isfinite(r["test_ppl"]):
            ln[seed] = r["test_ppl"]
            L.append("| LN (reference, m not used) | %d | %s |" % (
                seed, " | ".join("%.1f" % r["test_ppl"] for _ in minis)))
    pooled = pool(a, [(r["dir"], r["dir"]) for r in rows] +
                  [(os.path.join(a.out, "table", "layer_s%d" % s),) * 2 for s in ln])
    L[3:3] = [""] + provenance.describe(pooled)
    lines, groups, comps, findings = figure5_seed_summary(a, runner, by, vlist, minis, U, pooled)
    L += lines
    plan_l, plan = plan_lines(a, "figure5", [(k, s, m) for (k, s, m) in by])
    L += plan_l + tuning_lines(a, runner, labels)
    flags = {name: "--max-tokens %s --update-freq %d" % (name.rsplit("_m", 1)[1],
                                                         U // int(name.rsplit("_m", 1)[1]))
             for name, _ in groups}
    glabels = {name: "%s, m = %s" % (labels[name.rsplit("_m", 1)[0]], name.rsplit("_m", 1)[1])
               for name, _ in groups}
    write_report_json(a, runner, "figure5", "Figure 5 analog, --%s (%s epochs)" % (
        a.preset, runner.ini.get("max-epoch")), groups, comps,
        "each m against m = %d within the figure" % U, findings, pooled, plan, glabels,
        None, flags)
    if findings:
        L += ["", "## Findings", ""] + ["- " + x for x in findings]
    plt = plt_or_none()
    if plt is not None and rows:
        draw_figure5(plt, by, ln, vlist, runner.seeds, minis, U, a.preset,
                     os.path.join(a.out, "figs", "figure5_%s.png" % a.preset))
        L += ["", "![Figure 5 analog](figs/figure5_%s.png)" % a.preset]
    probed_m = [m for m in minis if os.path.exists(os.path.join(
        a.out, "figure5", "batch_m%d_s%d" % (m, runner.seeds[0]), "metrics.jsonl"))]
    probed_m = sorted({probed_m[0], probed_m[-1]}) if probed_m else []  # the extremes
    probed = [os.path.join(a.out, "figure5", "batch_m%d_s%d" % (m, runner.seeds[0]),
                           "metrics.jsonl") for m in probed_m]
    if probed:
        out = os.path.join(a.out, "figs", "figure5_bn_stats")
        subprocess.call([sys.executable, os.path.join(HERE, "plot.py")] + probed + ["--out", out],
                        stdout=subprocess.DEVNULL)
        if os.path.exists(os.path.join(out, "norm_stats.png")):
            L += ["", "BN's batch statistics against its running ones over training, at m = %s "
                  "(the Figures 2-4 analog; one line per layer):" % " and ".join(
                      str(m) for m in probed_m), "",
                  "![BN statistics distances](figs/figure5_bn_stats/norm_stats.png)"]
    path = os.path.join(a.out, "FIGURE5.md")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")
    return path


def curve_groups(curves):
    """{norm label: {seed: curve}} of draw_curves' "<label> s<seed>" keys, in their order."""
    groups = {}
    for name, c in curves.items():
        label, s = name.rsplit(" ", 1)
        groups.setdefault(label, {})[int(s[1:])] = c
    return groups


def seed_band(series):
    """[(x, mean, min, max)] over the seeds' {x: value} series, at every x any seed has; a
    seed without a point inside its own range (a validation lost with a killed attempt) is
    interpolated there, so that the mean does not jump."""
    xs = sorted({x for s in series for x in s})
    filled = []
    for s in series:
        known = sorted(s)
        f = dict(s)
        for x in xs:
            if known and known[0] < x < known[-1] and x not in f:
                i = next(k for k, kx in enumerate(known) if kx > x)
                x0, x1 = known[i - 1], known[i]
                f[x] = s[x0] + (s[x1] - s[x0]) * (x - x0) / (x1 - x0)
        filled.append(f)
    out = []
    for x in xs:
        v = [f[x] for f in filled if x in f]
        out.append((x, sum(v) / len(v), min(v), max(v)))
    return out


def draw_band(ax, x, band, color, ranged, lw=1.6):
    """A seed_band's mean as a line and, over several seeds, their range as a band."""
    ax.plot(x, [b[1] for b in band], color=color, lw=lw)
    if ranged:
        ax.fill_between(x, [b[2] for b in band], [b[3] for b in band], color=color, alpha=0.18,
                        lw=0)


def draw_curves(curves, warmup, path, preset):
    """The learning curves of an epoch preset, one colour per norm, the mean over its seeds as
    a line and their range as a band: (a) validation perplexity against epochs from epoch 2,
    (b) the gap to LN's validation perplexity at the same update and seed, in percent (the
    seeds that have an LN cell), (c) training nll (mean over the 57 updates before each
    validation, dropout on) against validation nll. One legend below the panels."""
    plt = plt_or_none()
    if plt is None or not curves:
        return False
    groups = curve_groups(curves)
    pe_all = [c["per_epoch"] for c in curves.values() if math.isfinite(c["per_epoch"])]
    pe = sum(pe_all) / len(pe_all) if pe_all else 227.0
    colors = {label: "C%d" % i for i, label in enumerate(groups)}
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(18, 5.6))
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color=colors[label], lw=1.6, label="%s (%s)" % (
        label, "seed %d" % next(iter(by_seed)) if len(by_seed) == 1
        else "seeds %s" % ",".join(map(str, sorted(by_seed)))))
        for label, by_seed in groups.items()]
    # (a) leaves out the first epochs, whose perplexities dwarf the rest, where there are more.
    end = max((u / pe for c in curves.values() for u, _ in c["valid"]), default=0.0)
    start = 2.0 if end >= 4.0 else 0.0
    lo, hi = float("inf"), 0.0
    zoomed = []
    for label, by_seed in groups.items():
        band = seed_band([dict(c["valid"]) for c in by_seed.values()])
        band = [b for b in band if b[0] / pe >= start]
        if not band:
            continue
        e = [b[0] / pe for b in band]
        draw_band(a1, e, band, colors[label], len(by_seed) > 1)
        lo, hi = min(lo, min(b[2] for b in band)), max(hi, max(b[3] for b in band))
        zoomed.append((e, band, colors[label], len(by_seed) > 1))
    a1.set_xlim(left=start)
    if hi > lo:
        a1.set_ylim(lo - 0.02 * (hi - lo), hi)
    # The inset: the second half of the epochs, where the norms part, at a readable scale.
    last = max((e[-1] for e, _, _, _ in zoomed), default=0.0)
    if start and last > 2 * start:
        ins = a1.inset_axes([0.36, 0.38, 0.61, 0.58])
        zlo, zhi = float("inf"), 0.0
        for e, band, color, ranged in zoomed:
            keep = [i for i, x in enumerate(e) if x >= last / 2]
            if not keep:
                continue
            ee, bb = [e[i] for i in keep], [band[i] for i in keep]
            draw_band(ins, ee, bb, color, ranged, lw=1.4)
            zlo, zhi = min(zlo, min(b[2] for b in bb)), max(zhi, max(b[3] for b in bb))
        ins.set_xlim(last / 2, last)
        if zhi > zlo:
            ins.set_ylim(zlo - 0.03 * (zhi - zlo), zhi + 0.03 * (zhi - zlo))
        ins.text(0.02, 0.96, "zoom: epoch %.0f on" % (last / 2), transform=ins.transAxes,
                 fontsize=8, va="top")
        ins.tick_params(labelsize=7)
        ins.grid(True, alpha=0.3)
    a1.set_xlabel("epoch")
    a1.set_ylabel("validation perplexity")
    a1.set_title("(a) validation perplexity%s\n(line: mean over seeds; band: their range)" % (
        " from epoch %g" % start if start else ""), fontsize=10)
    a1.grid(True, alpha=0.3)
    # (b) the gap to LN: per seed against LN's cell of the same seed, then mean and range.
    ln = groups.get("LN", {})
    gmin, gmax = 0.0, 0.0
    for label, by_seed in groups.items():
        if label == "LN":
            continue
        series = []
        for s, c in by_seed.items():
            if s in ln:
                ln_at = dict(ln[s]["valid"])
                series.append({u: 100.0 * (p / ln_at[u] - 1) for u, p in c["valid"] if u in ln_at})
        band = seed_band(series)
        if not band:
            continue
        e = [b[0] / pe for b in band]
        draw_band(a2, e, band, colors[label], len(series) > 1)
        late = [b for b in band if b[0] / pe >= start]
        if late:
            gmin, gmax = min(gmin, min(b[2] for b in late)), max(gmax, max(b[3] for b in late))
    a2.axhline(0, color=colors.get("LN", "black"), lw=1.2)
    a2.set_ylim(min(-1.0, gmin - 0.5), max(1.0, gmax + 0.5))
    a2.set_xlabel("epoch")
    a2.set_ylabel("validation perplexity vs LN's at the same update (%)")
    a2.set_title("(b) the gap to LN, per seed against LN's cell of that seed: mean and range\n"
                 "(above 0: worse than LN%s)" % ("; y limits from epoch %g on" % start
                                                  if start else ""), fontsize=10)
    a2.grid(True, alpha=0.3)
    # (c) training against validation nll, the mean over seeds of each norm.
    tlo = float("inf")
    for label, by_seed in groups.items():
        tr = seed_band([dict(smoothed_train_nll(c)) for c in by_seed.values()])
        va = seed_band([{u: math.log(p) for u, p in c["valid"]} for c in by_seed.values()])
        a3.plot([b[0] / pe for b in tr], [b[1] for b in tr], color=colors[label], ls="-", lw=1.2)
        a3.plot([b[0] / pe for b in va], [b[1] for b in va], color=colors[label], ls=":", lw=1.6)
        if tr:
            tlo = min(tlo, min(b[1] for b in tr))
    if warmup:
        a3.axvline(warmup / pe, color="grey", ls="--", lw=0.8)
    if math.isfinite(tlo) and tlo < 5.3:  # (c) from a level most of the training is below
        a3.set_ylim(tlo - 0.05, 5.6)
    a3.set_xlabel("epoch (dashed grey: end of the warmup of the learning rate and PN's psi)"
                  if warmup else "epoch")
    a3.set_ylabel("nll (nats/token)")
    a3.set_title("(c) training nll (solid: mean of 57 updates, dropout on)\nagainst validation "
                 "nll (dotted), mean over seeds", fontsize=10)
    a3.grid(True, alpha=0.3)
    fig.suptitle("PTB learning curves, --%s preset" % preset, fontsize=12)
    fig.legend(handles=handles, loc="lower center", ncol=max(1, min(len(handles), 5)), fontsize=9,
               frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 0.96))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def seed_groups(rows, vlist, metric="test_ppl"):
    """[(key, {"values": {seed: value}, "capped": [seeds]})] of the finished rows, in vlist's
    order."""
    out = []
    for v in vlist:
        rs = [r for r in rows if r["key"] == v[0] and math.isfinite(r.get(metric, float("nan")))]
        if rs:
            out.append((v[0], {"values": {r["seed"]: r[metric] for r in rs},
                               "capped": sorted(r["seed"] for r in rs if r.get("capped"))}))
    return out


def seed_summary(a, runner, rows, vlist, pooled, metric="test_ppl", unit="test ppl"):
    """Markdown lines: per norm the metric's mean, sd and n over seeds; its difference to LN's
    with Welch's 95% interval and p, Holm's adjusted p over the family of every norm against LN,
    the paired test by seed, the difference detectable with 80% power; a sentence on each.
    Returns (lines, groups, comparisons, findings)."""
    labels = {v[0]: v[1] for v in vlist}
    groups = seed_groups(rows, vlist, metric)
    g = {k: x["values"] for k, x in groups}
    comps = run_family(g, "layer", [k for k, _ in groups])
    n = len(comps)
    fam = "each norm against LN (%s comparison%s, one family)" % (words(n), "s" * (n != 1))
    L = ["", "## Over seeds: each norm against LN", "",
         "%s at the best validation, mean ± sample standard deviation over the seeds; the "
         "difference to LN's mean with Welch's 95%% interval and two-sided p (scipy), Holm's "
         "adjusted p over the family declared here: %s; the paired t-test over the seeds both "
         "have (a seed fixes data order and initialisation); the difference a Welch test detects "
         "with 80%% power at these spreads (two-sided alpha 0.05). Negative: lower than LN. "
         "Capped: the seeds whose best validation is their last (below)." % (
             unit.capitalize(), fam), "",
         "| norm | seeds | %s | − LN | 95%% CI | p | Holm p | paired p | detectable (80%%) | "
         "capped |" % unit, "|---|---|---|---|---|---|---|---|---|---|"]
    by = {k: c for k, _, c in comps}
    ln_m = mean_sd(list(g["layer"].values()))[0] if "layer" in g else None
    for key, x in groups:
        m, sd, nn = mean_sd(list(x["values"].values()))
        cap = ",".join(map(str, x["capped"])) if x["capped"] else "—"
        if key == "layer" or key not in by:
            L.append("| %s | %d | %.2f ± %.2f | — | — | — | — | — | — | %s |" % (
                labels[key], nn, m, sd, cap))
            continue
        c = by[key]
        diff = "%+.2f (%+.1f%%)" % (c["diff"], c["diff_pct"]) if ln_m else "—"
        L.append("| %s | %d | %.2f ± %.2f | %s | %s %s |" % (
            labels[key], nn, m, sd, diff, stat_cells(c), cap))
    seeds = ",".join(map(str, sorted({s for _, x in groups for s in x["values"]})))
    where = device_words(pooled, a)
    findings = [finding(budget_words(a, runner), labels[k], "LN", c, n, "%s norms" % words(n),
                        seeds, where) for k, _, c in comps]
    if comps:
        L += ["", "In words:", ""] + ["- " + describe_difference(labels[k], "LN", c, unit, n)
                                      for k, _, c in comps]
    L += capped_note(rows, labels, a.preset in EPOCH_PRESETS) + test_source_note(rows)
    return L, groups, comps, findings


def smoothed_train_nll(curve, window=57):
    """[(update, mean training nll over the `window` updates up to it)] at each validation."""
    tr = dict(curve["train"])
    out = []
    for u, _ in curve["valid"]:
        xs = [tr[k] for k in range(u - window + 1, u + 1) if k in tr]
        if xs:
            out.append((u, sum(xs) / len(xs)))
    return out


def matched_loss_table(labelled_rows, title="## At matched training loss"):
    """Markdown lines: the validation perplexity of each cell at the first validation where its
    training nll (mean of the 57 updates before it, dropout on) has come down to a level every
    cell reaches: the largest of the cells' lowest values. A norm that merely fits the training
    set faster shows no gain here."""
    cells = []
    for label, r in labelled_rows:
        c = learning_curve(r["dir"])
        tr = smoothed_train_nll(c)
        if tr:
            cells.append((label, r, c, tr))
    if len(cells) < 2:
        return []
    target = max(min(x for _, x in tr) for _, _, _, tr in cells)
    L = ["", title, "",
         "Each cell at the first validation where its training nll (mean of the 57 updates "
         "before it, with dropout) is at most %.3f, the lowest level every cell here reaches; "
         "beside it the cell at its best validation (the table's point) with its training nll "
         "there." % target, "",
         "| cell | update at matched loss | valid ppl there | best-valid update | train nll "
         "there | best valid ppl |", "|---|---|---|---|---|---|"]
    for label, r, c, tr in cells:
        u = next(u for u, x in tr if x <= target)
        valid = dict(c["valid"])
        bu = min(c["valid"], key=lambda p: p[1])[0]
        btr = dict(tr).get(bu, float("nan"))
        L.append("| %s s%d | %d | %.1f | %d | %.3f | %.1f |" % (
            label, r["seed"], u, valid[u], bu, btr, valid[bu]))
    return L


def alpha_grid_table(a, labels):
    """The medium preset's PN momenta table: the best validation perplexity of each short run
    of ALPHA_GRID and the alpha chosen, per PN variant (markdown lines)."""
    L = ["", "## PN's momenta (alpha_fwd = alpha_bkw), picked on short runs", "",
          "| variant | updates | " + " | ".join("alpha %s" % x for x in ALPHA_GRID) + " | chosen |",
          "|---|---|" + "---|" * (len(ALPHA_GRID) + 1)]
    for key in ("power", "power_authors"):
        try:
            with open(os.path.join(a.out, "tune", "%s.json" % key)) as f:
                t = json.load(f)
        except (OSError, ValueError):
            continue
        L.append("| %s | %d | %s | %s |" % (labels.get(key, key), t["updates"], " | ".join(
            "%.1f" % t["best_valid_ppl"][x] if x in t["best_valid_ppl"] else "—"
            for x in ALPHA_GRID), t["alpha"]))
    L += ["", "Best validation perplexity of each short run (seed 1, whichever seeds the table has).", ""]
    return L


def write_medium_report(a, runner, rows, vlist, elapsed):
    """REPORT.md of the medium and long presets: the table at the best-validation checkpoints,
    the statistics over seeds with the declared family, provenance, the plan, the tuning, the
    PN alpha grid, the learning curves of every cell that has started; and report.json."""
    labels = {v[0]: v[1] for v in vlist}
    done = [r for r in rows if math.isfinite(r["valid_ppl"])]
    pooled = pool(a, [(r["dir"], r["dir"]) for r in done])
    paper = paper_numbers(runner, "lm")
    L = ["# PowerNorm reproduction: language model, --%s" % a.preset, ""]
    L.append("Config `%s`, data `%s`, seeds %s, %d rank(s), device %s. Each cell trains until "
             "--max-epoch %s or %s validations without improvement (--patience); its test "
             "perplexity is that of checkpoint_best, the best validation. Generated by "
             "`launcher/pn reproduce --task lm --%s` (this invocation: %.0f min)." % (
                 os.path.relpath(runner.config, ROOT),
                 runner.data if runner.data == "builtin" else os.path.relpath(runner.data, ROOT),
                 a.seeds, a.ranks, pooled["fields"]["device"] if done else a.device,
                 runner.ini.get("max-epoch"), runner.ini.get("patience"), a.preset,
                 elapsed / 60) + invocation_note(a))
    if runner.extra:
        L.append("Extra pntrain flags: `%s`." % " ".join(runner.extra))
    L += [""] + provenance.describe(pooled)
    L += ["", "## Table 2 analog", "",
          "| norm | seed | best valid ppl | test ppl at best valid | epoch of best | epochs "
          "trained | train min (here) |%s capped |" % (" paper test ppl |" if paper else ""),
          "|---|---|---|---|---|---|---|---|%s" % ("---|" if paper else "")]
    for r in sorted(rows, key=lambda r: ([v[0] for v in vlist].index(r["key"]), r["seed"])):
        if not math.isfinite(r["valid_ppl"]):
            continue
        pkey = {"layer": "layer", "batch": "batch", "power_v": "power_v", "power": "power",
                "power_authors": "power"}.get(r["key"])
        L.append("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.0f |%s %s |" % (
            labels[r["key"]], r["seed"], r["valid_ppl"], r["test_ppl"], r["best_epoch"],
            r["epochs"], r["train_s"] / 60,
            (" %s |" % ("%.1f" % paper[pkey] if pkey in paper else "—")) if paper else "",
            "*" if r.get("capped") else ""))
    missing = ["%s seed %d" % (labels[r["key"]], r["seed"]) for r in rows
               if not math.isfinite(r["valid_ppl"])]
    if missing:
        L += ["", "Not finished: " + ", ".join(missing) + "."]
    if not paper:
        L += ["", "No paper column: the corpus (%s) is not the paper's PTB." % corpus_of(runner)]
    lines, groups, comps, findings = seed_summary(a, runner, rows, vlist, pooled)
    L += lines
    plan_l, plan = plan_lines(a, "table", [(r["key"], r["seed"], None) for r in done])
    L += plan_l
    L += matched_loss_table([(labels[r["key"]], r) for r in rows
                             if math.isfinite(r["valid_ppl"])])
    alpha = flag_value(runner.extra, "pn-alpha-fwd", None)
    if alpha is not None:
        L += ["", "PN's momenta: alpha_fwd %s, alpha_bkw %s for both variants, from the extra "
              "pntrain flags (each cell's cmd.txt)." % (
                  alpha, flag_value(runner.extra, "pn-alpha-bkw", alpha)), ""]
    elif a.no_tune:
        L += ["", "PN's momenta: alpha_fwd %s, alpha_bkw %s for both variants, from the config%s." % (
            runner.ini.get("pn-alpha-fwd"), runner.ini.get("pn-alpha-bkw"),
            " (the medium preset's choice on its short runs)" if a.preset == "long" else ""), ""]
    else:
        L += alpha_grid_table(a, labels)
    L += tuning_lines(a, runner, labels) + [""]
    flags = {v[0]: " ".join(["--norm", v[2]] + v[3]) for v in vlist}
    write_report_json(a, runner, "table", "PTB LM, --%s (%s epochs)" % (
        a.preset, runner.ini.get("max-epoch")) if corpus_of(runner) == "ptb" else
        "%s LM, --%s" % (corpus_of(runner), a.preset), groups, comps,
        "each norm against LN", findings, pooled, plan, labels, paper, flags)
    if findings:
        L += ["## Findings", ""] + ["- " + x for x in findings] + [""]
    curves = {}  # of the finished cells: a cell still training would end its curve mid-way
    finished = {(r["key"], r["seed"]) for r in rows if math.isfinite(r["valid_ppl"])}
    for key, label, _, _, _ in vlist:
        for seed in runner.seeds:
            d = os.path.join(a.out, "table", "%s_s%d" % (key, seed))
            c = learning_curve(d)
            if c["valid"] and (key, seed) in finished:
                curves["%s s%d" % (label, seed)] = c
    W = int(flag_value(runner.extra, "warmup-updates", runner.ini.get("warmup-updates", "0")))
    L += ["## Learning curves", ""]
    fig = "curves_%s.png" % a.preset
    if draw_curves(curves, W, os.path.join(a.out, "figs", fig), a.preset):
        L += ["![learning curves](figs/%s)" % fig, ""]
    for label, c in curves.items():
        pe = c["per_epoch"] if math.isfinite(c["per_epoch"]) else 227.0
        L.append("- %s: " % label + ", ".join("ep %.1f: %.1f" % (u / pe, p)
                                             for u, p in c["valid"]))
    path = os.path.join(a.out, "REPORT.md")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")
    return path


def say_missing(missing, what, name):
    """Names the cells without a result on stderr; the exit status (1 where any)."""
    if missing:
        print("reproduce: %d %s without a result: %s" % (
            len(missing), what, ", ".join(name(r) for r in missing)), file=sys.stderr)
    return 1 if missing else 0


def run_figure5(a, runner, vlist, report_vlist):
    """The Figure 5 cells of an epoch preset, seed-major, each resumable; FIGURE5.md grows with
    them, and shows every cell of report_vlist x seeds x m = 512..update (and --mini-batches)
    that has a result, whichever invocation trained it. Returns the exit status (1 when a cell
    of this invocation has no result)."""
    try:
        minis = int_list(a.mini_batches or "512,1024,2048,4096", "--mini-batches")
    except ValueError as e:
        die(str(e))
    bad = [m for m in minis if a.update_tokens % m]
    if bad:
        die("--mini-batches %s: each must divide --update-tokens %d" % (
            ",".join(map(str, bad)), a.update_tokens))
    cells = [(v, s, m) for s in runner.seeds for v in vlist for m in minis]
    print("reproduce: Figure 5 analog: %d cells (%s x m %s x seeds %s), %d-token updates, "
          "until early stopping (at most %s epochs) -> %s" % (
              len(cells), ",".join(v[0] for v in vlist), ",".join(map(str, minis)), a.seeds,
              a.update_tokens, runner.ini.get("max-epoch"), a.out), flush=True)
    t0, rows = time.time(), []
    report_minis = sorted(set(minis) | {m for m in (512, 1024, 2048, 4096)
                                        if m <= a.update_tokens and a.update_tokens % m == 0})
    report_vlist = report_vlist + [v for v in vlist if v not in report_vlist]

    def report():
        mine = {(r["key"], r["seed"], r["m"]): r for r in rows}
        shown = []
        for seed in runner.seeds:
            for v in report_vlist:
                for m in report_minis:
                    r = mine.get((v[0], seed, m))
                    if r is None:
                        r = dict(runner.row(v[0], seed, runner.figure5_dir(v[0], seed, m)[0]), m=m)
                    if math.isfinite(r["test_ppl"]):
                        shown.append(r)
        shown_minis = sorted({r["m"] for r in shown}) or minis  # columns with a result
        return write_figure5_report(a, runner, shown, report_vlist, shown_minis,
                                    time.time() - t0)

    if not a.report_only:
        write_plan(a, runner, "figure5", [v[0] for v in vlist], {"mini_batches": minis},
                   "each norm at each m against its own m = %d" % a.update_tokens,
                   "each m against m = %d within the figure" % a.update_tokens)
    for i, ((key, _, norm, flags, _), seed, m) in enumerate(cells, 1):
        tag = "[%d/%d] %-14s m %4d seed %d" % (i, len(cells), key, m, seed)
        if a.report_only:
            row = runner.row(key, seed, runner.figure5_dir(key, seed, m)[0])
        else:
            row = runner.figure5_cell(key, norm, flags, seed, m, tag)
        row["m"] = m
        rows.append(row)
        if not a.report_only:
            interim(report)
    path = report()
    print("reproduce: wrote %s (%.1f min)" % (path, (time.time() - t0) / 60))
    return say_missing([r for r in rows if not math.isfinite(r["test_ppl"])], "Figure 5 cell(s)",
                       lambda r: "%s m %d seed %d" % (r["key"], r["m"], r["seed"]))


def draw_dropout(plt, got, vlist, seeds, ps, best, preset, path):
    """The dropout control: test perplexity at the best validation against dropout, per norm a
    line through the mean over its seeds at each dropout, each seed's cell an open marker, a bar
    over the seeds' range, and the dropout the report chose for the norm (by validation) ringed."""
    fig, ax = plt.subplots(figsize=(9.6, 4.8))
    xs = [float(p) for p in ps]
    step = min(b - a_ for a_, b in zip(xs, xs[1:])) if len(xs) > 1 else 0.1
    n = len(vlist)
    for i, (key, label) in enumerate((v[0], v[1]) for v in vlist):
        color, marker, ls = NORM_STYLE.get(key, ("C%d" % (i + 5), "o", "-"))
        dx = 0.06 * step * (i - (n - 1) / 2)  # side by side at each dropout
        means = []
        for p, x in zip(ps, xs):
            vals = [got[(key, s, p)]["test_ppl"] for s in seeds if (key, s, p) in got]
            if not vals:
                continue
            mean = seed_marks(ax, x + dx, vals, color, marker)
            means.append((x + dx, mean, len(vals)))
            if best.get(key) == p:
                ax.plot([x + dx], [mean], ls="none", marker="o", ms=14, mfc="none", color=color,
                        mew=1.4)
        if means:
            ax.plot([m[0] for m in means], [m[1] for m in means], ls=ls, marker=marker, ms=7,
                    lw=1.6, color=color, label="%s: best %s; seeds %s" % (
                        label, best.get(key, "—"), "/".join(str(m[2]) for m in means)))
    ax.set_xticks(xs)
    ax.set_xticklabels(ps)
    ax.set_xlabel("dropout (the config's own is the table's cell)")
    ax.set_ylabel("test perplexity at the best validation")
    ax.set_title("The dropout control (%s budget): lower is better; filled: the mean over seeds, "
                 "open: each seed, bars: their range, ring: the dropout chosen by validation"
                 % preset, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
              title="norm: chosen dropout; seeds at each dropout", title_fontsize=8)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def write_dropout_report(a, runner, vlist, ps):
    """DROPOUT.md: every finished dropout cell, each norm at its own best dropout (by mean best
    validation perplexity over seeds) against LN at its own, with Welch's intervals, and the
    cells of each dropout at matched training loss."""
    labels = {v[0]: v[1] for v in vlist}
    got = {}
    for v in vlist:
        for seed in runner.seeds:
            for p in ps:
                r = runner.row(v[0], seed, runner.dropout_dir(v[0], seed, p)[0])
                if math.isfinite(r["test_ppl"]):
                    got[(v[0], seed, p)] = r
    own = [p for p in ps if float(p) == float(runner.config_dropout())]
    own_cells = [k for k in got if k[2] in own]
    own_words = ("the cells at %s are the table's own, in table/" % own[0] if own_cells else
                 "no cell at %s, the config's own, is in this folder yet: that column is empty"
                 % runner.config_dropout() if own else
                 "the config's own %s is not in this grid" % runner.config_dropout())
    pooled = pool(a, [(r["dir"], r["dir"]) for r in got.values()])
    L = ["# PowerNorm reproduction: the dropout control at the %s budget" % a.preset, "",
         "Config `%s` (dropout %s there), seeds %s; every norm trained as the table's cells at "
         "dropout %s (%s). Test perplexity of the best-validation checkpoint, its validation "
         "perplexity in brackets. Generated by `launcher/pn reproduce --task lm --%s%s "
         "--dropouts %s`." % (
             os.path.relpath(runner.config, ROOT), runner.config_dropout(), a.seeds,
             ", ".join(ps), own_words, a.preset,
             " --device cuda" if a.device == "cuda" else "", a.dropouts or ",".join(ps)) +
         invocation_note(a), "",
         "| norm | seed | " + " | ".join("dropout %s" % p for p in ps) + " |",
         "|---|---|" + "---|" * len(ps)]
    for v in vlist:
        for seed in runner.seeds:
            cells = [got.get((v[0], seed, p)) for p in ps]
            if any(cells):
                L.append("| %s | %d | %s |" % (v[1], seed, " | ".join(
                    "%.1f (%.1f)" % (r["test_ppl"], r["valid_ppl"]) if r else "—" for r in cells)))
    # A dropout is chosen on two seeds or more where the norm has any such (one seed's
    # validation is no mean to compare with another dropout's); a single-seed dropout that
    # validates better than the choice is named below it, as the cell that needs seeds.
    best, unseeded = {}, []
    for v in vlist:
        runs = {p: [got[(v[0], s, p)]["valid_ppl"] for s in runner.seeds if (v[0], s, p) in got]
                for p in ps}
        score = {p: statistics.mean(x) for p, x in runs.items() if x}
        eligible = [p for p in score if len(runs[p]) >= 2] or list(score)
        if eligible:
            best[v[0]] = min(eligible, key=lambda p: score[p])
            unseeded += ["%s at dropout %s (%d seed, best validation %.1f) validates better than "
                         "its choice %s (mean %.1f over %d seeds): it needs seeds before it can "
                         "be chosen." % (v[1], p, len(runs[p]), score[p], best[v[0]],
                                        score[best[v[0]]], len(runs[best[v[0]]]))
                         for p in score if p not in eligible and score[p] < score[best[v[0]]]]
    complete = [v[0] for v in vlist if all((v[0], s, p) in got for s in runner.seeds[:1]
                                           for p in ps)]
    L[3:3] = [""] + provenance.describe(pooled)
    L += ["", "## Each norm at its own best dropout", "",
          "The dropout of the lowest mean best-validation perplexity over the seeds that have "
          "finished, among the dropouts with two seeds or more where the norm has such (the "
          "test set plays no part in the choice; every norm is chosen over the same grid). A "
          "norm whose dropout cells have not all finished is marked: its best may still change. "
          "Each norm against LN at their chosen dropouts: Welch's 95% interval and p (scipy), "
          "Holm's adjusted p over the family of every norm against LN here, the paired test "
          "by seed, the difference detectable with 80% power.", "",
          "| norm | best dropout | seeds | test ppl | − LN at its best | 95% CI | p | Holm p | "
          "paired p | detectable (80%) |", "|---|---|---|---|---|---|---|---|---|---|"]
    g, groups = {}, []
    for v in vlist:
        if v[0] in best:
            cells = {s: got[(v[0], s, best[v[0]])] for s in runner.seeds
                     if (v[0], s, best[v[0]]) in got}
            g[v[0]] = {s: r["test_ppl"] for s, r in cells.items()}
            groups.append((v[0], {"values": g[v[0]], "capped": sorted(
                s for s, r in cells.items() if r.get("capped"))}))
    comps = run_family(g, "layer", [v[0] for v in vlist])
    by_c = {k: c for k, _, c in comps}
    n = len(comps)
    texts = []
    for v in vlist:
        if v[0] not in best:
            continue
        m, sd, nn = mean_sd(list(g[v[0]].values()))
        mark = "" if v[0] in complete else " (grid unfinished)"
        if v[0] not in by_c:
            L.append("| %s | %s%s | %d | %.2f ± %.2f | — | — | — | — | — | — |" % (
                v[1], best[v[0]], mark, nn, m, sd))
            continue
        c = by_c[v[0]]
        L.append("| %s | %s%s | %d | %.2f ± %.2f | %+.2f | %s" % (
            v[1], best[v[0]], mark, nn, m, sd, c["diff"], stat_cells(c)))
        texts.append(describe_difference("%s (dropout %s)" % (v[1], best[v[0]]),
                                          "LN (dropout %s)" % best["layer"], c, "test ppl", n))
    seeds = ",".join(map(str, sorted({s for (_, s, _) in got})))
    findings = [finding(budget_words(a, runner) + " at each norm's best dropout",
                        "%s (dropout %s)" % (labels[k], best[k]), "LN (dropout %s)" %
                        best["layer"], c, n, "%s norms" % words(n), seeds,
                        device_words(pooled, a)) for k, _, c in comps]
    L += capped_note([r for r in got.values()], labels, False) + \
        test_source_note(list(got.values()))
    plan_l, plan = plan_lines(a, "dropout", list(got))
    L += plan_l + tuning_lines(a, runner, labels)
    glabels = {k: "%s, dropout %s" % (labels[k], best[k]) for k in best}
    flags = {v[0]: " ".join(["--norm", v[2]] + v[3] + ["--dropout", best[v[0]]])
             for v in vlist if v[0] in best}
    write_report_json(a, runner, "dropout", "PTB LM dropout control, --%s (%s epochs)%s" % (
        a.preset, runner.ini.get("max-epoch"), " on the GPU" if a.device == "cuda" else ""),
        groups, comps, "each norm against LN at their chosen dropouts", findings, pooled, plan,
        glabels, paper_numbers(runner, "lm"), flags)
    if findings:
        L += ["", "## Findings", ""] + ["- " + x for x in findings]
    lo, hi = min(ps, key=float), max(ps, key=float)
    edge = ["%s's choice %s is the grid's %s value: its best may lie outside the grid." % (
        labels[k], p, "smallest" if p == lo else "largest") for k, p in best.items()
        if len(ps) > 1 and p in (lo, hi)]
    if texts or unseeded or edge:
        L += ["", "In words:", ""] + ["- " + x for x in texts + unseeded + edge]
    plt = plt_or_none()
    if plt is not None and got:
        name = "dropout_%s.png" % a.preset
        draw_dropout(plt, got, vlist, runner.seeds, ps, best, a.preset,
                     os.path.join(a.out, "figs", name))
        L += ["", "![the dropout control](figs/%s)" % name]
    for p in ps:
        L += matched_loss_table([(labels[k], r) for (k, s, pp), r in got.items() if pp == p],
                                "## At matched training loss, dropout %s" % p)
    path = os.path.join(a.out, "DROPOUT.md")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")
    return path


def interim(write, *args):
    """A report written between cells: one the provenance check refuses is skipped (its line
    printed) so that the cells go on; the final report refuses."""
    try:
        return write(*args)
    except Refused:
        return None


def run_dropouts(a, runner, vlist, ps):
    """The dropout control of an epoch preset: every --norms at every dropout of ps, seed-major,
    each cell resumable; DROPOUT.md grows with them. Returns the exit status."""
    cells = [(v, s, p) for s in runner.seeds for v in vlist for p in ps]
    print("reproduce: dropout control: %d cells (%s x dropout %s x seeds %s) -> %s" % (
        len(cells), ",".join(v[0] for v in vlist), ",".join(ps), a.seeds, a.out), flush=True)
    t0, missing = time.time(), []
    if not a.report_only:
        write_plan(a, runner, "dropout", [v[0] for v in vlist], {"dropouts": ps},
                   "each norm at its best dropout (by validation) against LN at its own",
                   "each norm against LN at their chosen dropouts")
        interim(write_dropout_report, a, runner, vlist, ps)
    for i, ((key, _, norm, flags, _), seed, p) in enumerate(cells, 1):
        if a.report_only:
            break
        tag = "[%d/%d] %-14s dropout %s seed %d" % (i, len(cells), key, p, seed)
        row = runner.dropout_cell(key, norm, flags, seed, p, tag)
        if not math.isfinite(row["test_ppl"]):
            missing.append("%s dropout %s seed %d" % (key, p, seed))
        interim(write_dropout_report, a, runner, vlist, ps)
    path = write_dropout_report(a, runner, vlist, ps)
    print("reproduce: wrote %s (%.1f min)" % (path, (time.time() - t0) / 60))
    return say_missing(missing, "dropout cell(s)", lambda x: x)


def main():
    argv, extra = split_passthrough(sys.argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--pntrain", required=True, help="path of the built pntrain")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", dest="preset", action="store_const", const="quick",
                   help="the 2-core preset (default)")
    g.add_argument("--medium", dest="preset", action="store_const", const="medium",
                   help="the LM until LN has flattened (configs/reproduce_medium_ptb.ini): "
                        "learning curves, early stopping, tuned PN alphas; hours per cell")
    g.add_argument("--long", dest="preset", action="store_const", const="long",
                   help="the medium recipe to the paper's 30 epochs and early stopping "
                        "(configs/reproduce_long_ptb.ini): one to four hours of a core per cell")
    g.add_argument("--full", dest="preset", action="store_const", const="full",
                   help="the paper's recipe (configs/paper_ptb.ini, configs/paper_iwslt14.ini)")
    p.add_argument("--task", choices=["lm", "translation"], default="lm")
    p.add_argument("--seeds", default=None,
                   help="comma-separated seeds (default: quick 1,2, medium 1, long and full "
                        "1-6: six seeds a norm give 80%% power at a 1%% difference)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda passes --device cuda to pntrain (needs a pntrain with its GPU "
                        "trainer)")
    p.add_argument("--ranks", type=int, default=1, help="ranks per cell (mpirun -np)")
    p.add_argument("--config", help="INI file of every cell instead of the preset's")
    p.add_argument("--data", help="your own corpus directory instead of the preset's")
    p.add_argument("--norms", default=None,
                   help="rows to run, e.g. layer,power (default: all five)")
    p.add_argument("--ablation-norms", default=None, help="Figure 5 norms (default: preset)")
    p.add_argument("--mini-batches", default=None, help="Figure 5 mini-batches (default: preset)")
    p.add_argument("--update-tokens", type=int, default=4096, help="Figure 5 update size")
    p.add_argument("--no-ablation", action="store_true", help="skip the Figure 5 analog")
    p.add_argument("--figure5", action="store_true",
                   help="medium, long: the Figure 5 analog at the preset's budget instead of the "
                        "table: --norms (default batch,power_v,power,power_authors) at every "
                        "--mini-batches m (default 512,1024,2048,4096) by accumulation; writes "
                        "OUT/FIGURE5.md")
    p.add_argument("--dropouts", default=None,
                   help="medium, long: each norm at each of these dropouts")
    p.add_argument("--no-tune", action="store_true",
                   help="medium: PN's alphas from the config instead of the short-run grid")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: rewrite reports from finished cells")
    p.add_argument("--allow-mixed", action="append", default=[], metavar="FIELD",
                   choices=provenance.FIELDS,
                   help="pool cells whose provenance differs in FIELD")
    p.add_argument("--gen-sentences", type=int, default=None,
                   help="translation: test sentences translated for BLEU (0: all)")
    p.add_argument("--out", default=None, help="output directory (default reproduce_<task>_<preset>)")
    a = p.parse_args(argv)
    a.preset = a.preset or "quick"
    translation = a.task == "translation"
    if (a.task, a.preset) not in PRESETS:
        die("--%s is a preset of --task lm only" % a.preset)
    if a.preset in EPOCH_PRESETS:
        a.no_ablation = True  # the Table 2 analog and its curves
    if a.preset == "long":
        a.no_tune = True  # the config holds the medium tuning's alphas
    cfg_name, data, minis, ab_norms, gen, default_seeds, ab_updates = PRESETS[(a.task, a.preset)]
    a.seeds = a.seeds or default_seeds
    a.gen_sentences = gen if a.gen_sentences is None else a.gen_sentences
    config = os.path.abspath(a.config or os.path.join(ROOT, "configs", cfg_name))
    data = a.data or data
    a.out = os.path.abspath(a.out or "reproduce_%s_%s" % (a.task, a.preset))
    a.pntrain = os.path.abspath(a.pntrain)
    try:
        seeds = int_list(a.seeds, "--seeds")
    except ValueError as e:
        die(str(e))
    if not (os.path.isfile(a.pntrain) and os.access(a.pntrain, os.X_OK)):
        die("no pntrain executable at '%s': build it first (launcher/pn build)" % a.pntrain)
    if not os.path.isfile(config):
        die("no config file '%s'" % config)
    if data and data != "builtin" and not os.path.isdir(data):
        die("no data directory '%s' (the real corpora live in ../shared/data)" % data)
    if a.ranks < 1:
        die("--ranks must be positive")
    if a.ranks > 1 and shutil.which("mpirun") is None:
        die("--ranks %d needs mpirun (apt-get install openmpi-bin)" % a.ranks)
    for k in ("norm", "seed", "metrics", "save-dir", "eval-only", "pn-variant",
              "norm-prescale-groups", "probe-norm-stats"):
        if flag_value(extra, k, None) is not None:
            die("--%s is set per cell by the reproduction; do not pass it after --" % k)
    if a.device == "cuda":
        h = subprocess.run([a.pntrain, "--help"], capture_output=True, text=True).stdout
        if "--device" not in h:
            die("this pntrain has no --device flag (built without the GPU trainer): "
                "use --device cpu or build the GPU path")
    ini = read_ini(config)
    heads = int(flag_value(extra, "encoder-attention-heads" if translation else
                           "decoder-attention-heads",
                           ini.get("encoder-attention-heads" if translation else
                                   "decoder-attention-heads", "4")))
    vlist = variants(heads)
    if a.norms:
        want = [n.strip() for n in a.norms.split(",") if n.strip()]
        vlist = vlist + [(n, n, n, [], None) for n in known_norms(a.pntrain)
                         if n in want and n not in [v[0] for v in vlist]]
        unknown = [n for n in want if n not in [v[0] for v in vlist]]
        if unknown:
            die("--norms: unknown %s (choose from %s)" % (
                ",".join(unknown), ",".join(v[0] for v in vlist)))
        vlist = [next(v for v in vlist if v[0] == n) for n in want]  # in the order given
    os.makedirs(os.path.join(a.out, "figs"), exist_ok=True)
    runner = Runner(a, extra, config, data, translation, seeds)
    if a.figure5:
        if a.preset not in EPOCH_PRESETS:
            die("--figure5 is for --medium and --long (the other presets run ablate.py)")
        for k in ("max-tokens", "update-freq"):
            if flag_value(extra, k, None) is not None:
                die("--%s is set per Figure 5 cell (--mini-batches, --update-tokens); do not "
                    "pass it after --" % k)
        batch_type = [v for v in variants(heads) if v[0] != "layer"]
        return run_figure5(a, runner, vlist if a.norms else batch_type, batch_type)
    if a.dropouts:
        if a.preset not in EPOCH_PRESETS:
            die("--dropouts is for --medium and --long")
        if flag_value(extra, "dropout", None) is not None:
            die("--dropout is set per cell by --dropouts; do not pass it after --")
        try:
            ps = [p.strip() for p in a.dropouts.split(",") if p.strip()]
            if not ps or any(not 0.0 <= float(p) < 1.0 for p in ps):
                raise ValueError
        except ValueError:
            die("--dropouts '%s' must be comma-separated values in [0, 1)" % a.dropouts)
        own = runner.config_dropout()
        if not any(float(x) == float(own) for x in ps):
            print("reproduce: --dropouts %s: the config's own %s added (every dropout grid holds "
                  "it: it is the table's cell)" % (a.dropouts, own), flush=True)
            ps = sorted(ps + [own], key=float)
        return run_dropouts(a, runner, vlist, ps)
    t_all = time.time()
    cells = [(v, s) for s in seeds for v in vlist]  # seed-major: one full table row set first
    budget = ("until early stopping (at most %s epochs)" % runner.ini.get("max-epoch")
              if a.preset in EPOCH_PRESETS else "%d updates each" % runner.max_update)
    print("reproduce: %d table cells (%s x seeds %s), %s, config %s -> %s" % (
        len(cells), ",".join(v[0] for v in vlist), a.seeds, budget,
        os.path.relpath(config, ROOT), a.out), flush=True)
    if not a.report_only:  # the protocol, declared before the first cell (tuning runs included)
        tuned = a.preset in EPOCH_PRESETS and not a.no_tune
        write_plan(a, runner, "table", [v[0] for v in vlist],
                   {"pn_alpha": list(ALPHA_GRID) if tuned else None,
                    "pn_alpha_tuning": ("seed %d, %d updates, PN variants only" % (
                        TUNE_SEED, TUNE_UPDATES)) if tuned else None,
                    "ablation": None if a.no_ablation else {
                        "norms": (a.ablation_norms or ab_norms).split(","),
                        "mini_batches": int_list(a.mini_batches or minis, "--mini-batches")}},
                   "each norm's test_ppl against LN's (layer)", "each norm against LN")
    ab_dir = os.path.join(a.out, "ablation")
    ab_args = ["--task", a.task, "--norms", a.ablation_norms or ab_norms,
               "--mini-batches", a.mini_batches or minis,
               "--update-tokens", str(a.update_tokens), "--ranks", str(a.ranks),
               "--config", config] + (["--data", data] if data else [])
    ab_args += ["--gen-sentences", str(a.gen_sentences)] if translation else ["--ghost"]
    # The quick preset's ablation cells train for fewer updates than its table cells.
    ab_extra = list(extra)
    if ab_updates and flag_value(extra, "max-update", None) is None:
        ab_extra += ["--max-update", str(ab_updates)]

    drawn = [({}, None, {})]  # the last figures: redrawn when the first seed's cells are done

    def report(rows, ablation_ran, redraw):
        """REPORT.md from the finished cells (figures redrawn when asked)."""
        ablation = None
        if not a.no_ablation:
            import csv
            ab_rows = []
            csv_path = os.path.join(ab_dir, "ablation.csv")
            if ablation_ran and os.path.exists(csv_path):
                with open(csv_path) as f:
                    ab_rows = list(csv.DictReader(f))
            ablation = {"dir": ab_dir, "rows": ab_rows, "args": ab_args,
                        "extra": (["--"] + ab_extra) if ab_extra else [],
                        "ghost": not translation, "update_tokens": a.update_tokens}
        if a.preset in EPOCH_PRESETS:
            return write_medium_report(a, runner, rows, vlist, time.time() - t_all)
        if redraw:
            drawn[0] = figures(a, runner, rows, vlist, seeds[0], extra)
        spectra, warm, figs = drawn[0]
        return write_report(a, runner, rows, vlist, ablation, spectra, warm, figs,
                            time.time() - t_all)

    rows = []
    for i, ((key, label, norm, flags, _), seed) in enumerate(cells, 1):
        tag = "[%d/%d] %-14s seed %d" % (i, len(cells), key, seed)
        if a.report_only:
            cell_dir = os.path.join(a.out, "table", "%s_s%d" % (key, seed))
            if os.path.exists(os.path.join(cell_dir, "eval.json")):
                rows.append(runner.row(key, seed, cell_dir))
            continue
        rows.append(runner.table_cell(key, norm, flags, seed, probe=seed == seeds[0], tag=tag))
        # The report grows with the cells, so an interrupted run still leaves one; its
        # figures come from the first seed's cells.
        interim(report, rows, False, i == len(vlist))

    # Figure 5 analog: ablate.py over the preset's norms and mini-batches.
    if not a.no_ablation and not a.report_only:
        cmd = [sys.executable, os.path.join(HERE, "ablate.py"), "--pntrain", a.pntrain,
               "--out", ab_dir] + ab_args + (["--"] + ab_extra if ab_extra else [])
        print("reproduce: Figure 5 analog: ablate.py " + " ".join(ab_args), flush=True)
        subprocess.call(cmd)
    path = report(rows, True, redraw=True)

    print("reproduce: wrote %s (%.1f min)" % (path, (time.time() - t_all) / 60))
    return say_missing([r for r in rows if not math.isfinite(r["valid_ppl"])], "cell(s)",
                       lambda r: "%s seed %d" % (r["key"], r["seed"]))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Refused:
        sys.exit(2)  # check_pool printed the line naming the field and the cells
