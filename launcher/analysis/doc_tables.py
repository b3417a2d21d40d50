#!/usr/bin/env python3
"""Writes the tables of README.md and docs/*.md from the committed records under results/, and
checks that the docs agree with them.

A generated block sits between two markers, and everything between them is the generator's:
    <!-- table: NAME -->
    ...
    <!-- /table -->
NAME is one of TABLES below. `--write` rewrites every block from the records; the default,
`--check`, exits 1 naming each block that differs from what the records give (run `--write`)
and each rule of the docs that fails: no commit hash, no paragraph over 150 words, README.md at
most 160 lines, docs/gpu.md at most 250.

Usage: doc_tables.py [--root DIR] [--write | --check]
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_WORDS = 150
MAX_FINDINGS = 3  # the README shows the first findings of each report
MAX_LINES = {"README.md": 160, "docs/gpu.md": 250}
BEGIN = re.compile(r"^<!-- table: ([a-z0-9_]+) -->\s*$")
END = "<!-- /table -->"

GPU_RECORD = "results/gpu_check/h200_2026-11-28b"
CPU_ROWS = [  # (record file, config, norm, ranks, precision): the CPU speed table's rows
    ("results/vs_pytorch_cpu_2026-11-25/ptb_small_layer.json", "ptb_small", "layer", 1, "fp32"),
    ("results/vs_pytorch_cpu_2026-11-25/ptb_small_power.json", "ptb_small", "power", 1, "fp32"),
    ("results/bf16_cpu_amx_2026-11-26/vs_pytorch/compare.json", "ptb_small", "layer", 1, "bf16"),
]
# The reproduction reports the results table shows, as (run folder, column heading).
RESULT_RUNS = [("reproduce_lm_medium", "12 epochs, CPU"),
               ("reproduce_lm_long", "30 epochs, CPU")]
NORMS = [("layer", "LN"), ("batch", "BN"), ("power_v", "PN-V"), ("power", "PN (paper)"),
         ("power_authors", "PN (authors)")]
PAPER_PTB = {"layer": 53.2, "batch": 60.7, "power_v": 55.3, "power": 47.6, "power_authors": 47.6}


def date_of(path):
    m = re.search(r"(\d{4}-\d\d-\d\d)", path)
    return m.group(1) if m else "undated"


def runs(values):
    return [v for v in values if isinstance(v, (int, float))]


def med(values):
    v = runs(values)
    return statistics.median(v) if v else None


def fmt_int(x):
    return "—" if x is None else "{:,}".format(int(round(x)))


def ratio(a, b):
    return "—" if a is None or b is None else "%.2fx" % (a / b)


def first_line(path):
    with open(path) as f:
        return f.readline().strip()


def cpu_of(path):
    """The CPU a record's table names in its first line ("CPU: AMD EPYC, 2 cores; ...")."""
    same = os.path.splitext(path)[0] + ".md"
    for md in [same] + sorted(glob.glob(os.path.join(os.path.dirname(path), "*.md"))):
        m = re.match(r"CPU: ([^;]+);", first_line(md)) if os.path.exists(md) else None
        if m:
            return m.group(1).replace("(R)", "")
    raise ValueError("no table in %s names its CPU" % os.path.dirname(path))


def gpu_versions(root):
    """GPU, driver, CUDA, cuDNN and PyTorch as the GPU record's logs give them."""
    rec = os.path.join(root, GPU_RECORD)
    text = open(os.path.join(rec, "versions.log")).read()
    report = open(os.path.join(rec, "report.txt")).read()
    driver = re.search(r"Driver Version: ([0-9.]+)", text)
    cuda = re.search(r"release ([0-9.]+)", text)
    cudnn = re.search(r"cuDNN ([0-9.]+)", report)
    return {k: (m.group(1) if m else "unknown") for k, m in
            (("driver", driver), ("cuda", cuda), ("cudnn", cudnn))}


def table_speed_gpu(root):
    rec = os.path.join(root, GPU_RECORD)
    d = json.load(open(os.path.join(rec, "vs_pytorch_gpt2_small_wt2", "compare.json")))
    v = gpu_versions(root)
    out = ["| model | norm | pntrain tokens/s | PyTorch eager | `torch.compile` | vs eager "
           "| vs compile | MFU | GPU memory, GB (pntrain / compiled twin) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in d["rows"]:
        pn = med(r["pntrain"]["bf16"])
        eager, comp = med(r["torch"]["eager_bf16"]), med(r["torch"]["compile_bf16"])
        out.append("| GPT-2 small (%.1fM) | %s | %s | %s | %s | %s | %s | %.1f%% | %.2f / %.2f |" % (
            r["params"] / 1e6, r["norm"], fmt_int(pn), fmt_int(eager), fmt_int(comp),
            ratio(pn, eager), ratio(pn, comp), 100 * r["mfu_pntrain"]["bf16"],
            med(r["pntrain_gpu_mb"]) / 1000, med(r["torch_gpu_mb"]["compile_bf16"]) / 1000))
    plain = med(d["rows"][0]["torch"].get("plain-compile_bf16", []))
    out.append("")
    out.append("One %s (driver %s, CUDA %s, cuDNN %s), PyTorch %s on the same GPU, bf16, "
               "`configs/gpt2_small_wt2.ini` on WikiText-2 (16K-token updates), one run of 20 "
               "updates each, measured %s (record: `%s`, which names the commit). A plain "
               "PyTorch GPT-2 small under `torch.compile` runs %s tokens/s there."
               % (d["rows"][0]["gpu"], v["driver"], v["cuda"], v["cudnn"], d["torch"],
                  date_of(GPU_RECORD), GPU_RECORD, fmt_int(plain)))
    return out


def table_speed_cpu(root):
    out = ["| model | norm | CPU | ranks x threads | precision | pntrain tokens/s "
           "| PyTorch eager | `torch.compile` | vs eager | vs compile | RSS MB (pntrain / eager) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    torch_versions, dates = set(), set()
    for rel, config, norm, ranks, prec in CPU_ROWS:
        path = os.path.join(root, rel)
        d = json.load(open(path))
        r = [x for x in d["rows"] if x["config"] == config and x["ranks"] == ranks
             and (norm is None or x["norm"] == norm)][0]
        cpu = cpu_of(path)
        pn = med(r.get("pntrain_" + prec) or r.get("pntrain", {}).get(prec, []))
        eager = med(r["torch"].get("eager_" + prec, []))
        comp = med(r["torch"].get("compile_" + prec, []))
        rss = med(r["pntrain_rss_mb"])
        trss = med(r["torch_rss_mb"].get("eager_" + prec, []))
        label = "enc power, dec layer" if norm is None else norm
        out.append("| %s | %s | %s | %d x %d | %s | %s | %s | %s | %s | %s | %s / %s |" % (
            config, label, cpu, r["ranks"], r["threads"], prec, fmt_int(pn), fmt_int(eager),
            fmt_int(comp) if comp else "failed", ratio(pn, eager), ratio(pn, comp),
            fmt_int(rss), fmt_int(trss)))
        torch_versions.add(r.get("torch_version") or d.get("torch"))
        dates.add(date_of(rel))
    out.append("")
    out.append("Median of three runs of 20 updates after 5 of warm-up, dropout 0, PyTorch %s "
               "from PyPI, measured %s (records: `results/vs_pytorch_cpu_2026-11-25/`, "
               "`results/bf16_cpu_amx_2026-11-26/`)."
               % (", ".join(sorted(torch_versions)), " and ".join(sorted(dates))))
    return out


def cells(root, run):
    """{norm: [test ppl of each seed]} from a report's cells (table/<norm>_s<seed>/eval.json)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(root, "results", run, "table", "*_s*", "eval.json"))):
        norm = re.match(r"(.+)_s\d+$", os.path.basename(os.path.dirname(path))).group(1)
        out.setdefault(norm, []).append(json.load(open(path))["test_ppl"])
    return out


def report(root, run):
    path = os.path.join(root, "results", run, "report.json")
    return json.load(open(path)) if os.path.exists(path) else None


def values(root, run):
    """{norm: [test ppl of each seed]} as the run's report.json gives them (the cells' own
    eval.json before a report exists), so that the tables and the figure read one record."""
    rep = report(root, run)
    return {g["key"]: g["values"] for g in rep["groups"]} if rep else cells(root, run)


def result_cell(root, run, norm):
    rep = report(root, run)
    if rep is None:  # before the report exists: mean and spread of the committed cells only
        v = cells(root, run).get(norm, [])
        if not v:
            return "—"
        sd = statistics.stdev(v) if len(v) > 1 else 0.0
        return "%.2f ± %.2f (%d)" % (statistics.mean(v), sd, len(v))
    g = [x for x in rep["groups"] if x["key"] == norm]
    if not g:
        return "—"
    g = g[0]
    text = "%.2f ± %.2f (%d)" % (g["mean"], g["sd"], g["n"])
    for fam in rep["families"]:  # the comparisons against LN only, once
        for c in fam["comparisons"]:
            if c["group"] == norm and c["reference"] == "layer" and "%" not in text:
                text += ", %+.1f%% [%+.2f, %+.2f], p<sub>Holm</sub> %.3f" % (
                    c["diff_pct"], c["ci95"][0], c["ci95"][1], c["p_adj"])
    return text


def table_results(root):
    out = ["| norm | " + " | ".join(h for _, h in RESULT_RUNS) + " | paper (30 epochs) |",
           "|---|" + "---|" * len(RESULT_RUNS) + "---|"]
    paper = dict(PAPER_PTB)
    for run, _ in RESULT_RUNS:  # a report's own paper figures win over the constants
        rep = report(root, run)
        paper.update((rep or {}).get("paper") or {})
    flags = {}  # each norm's pntrain flags, as the reports name them
    for run, _ in RESULT_RUNS:
        for g in (report(root, run) or {}).get("groups", []):
            flags.setdefault(g["key"], g.get("flags") or "--norm " + g["key"])
    for key, label in NORMS:
        out.append("| %s (`%s`) | %s | %s |" % (
            label, flags.get(key, "--norm " + key),
            " | ".join(result_cell(root, run, key) for run, _ in RESULT_RUNS),
            "—" if paper.get(key) is None else "%.1f" % paper[key]))
    out.append("")
    out.append("PTB test perplexity at each seed's best validation: mean ± standard deviation "
               "(seeds); where the report gives it, the difference to LN with its 95% Welch "
               "interval and Holm-corrected p. Records: " + ", ".join(
                   "`results/%s/`" % run for run, _ in RESULT_RUNS) + ".")
    return out


def table_findings(root):
    out = []
    for run, heading in RESULT_RUNS:
        rep = report(root, run)
        if rep is None:
            out.append("- %s: the findings come from `results/%s/report.json` "
                       "(`launcher/pn reproduce` writes it)." % (heading, run))
        else:
            out.extend("- %s" % s for s in rep["findings"][:MAX_FINDINGS])
            if len(rep["findings"]) > MAX_FINDINGS:
                out.append("- More in `results/%s/REPORT.md`." % run)
    return out


TABLES = {"speed_gpu": table_speed_gpu, "speed_cpu": table_speed_cpu,
          "results": table_results, "findings": table_findings}


def doc_files(root):
    return [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))


def regenerate(root, text, where):
    """text with every block rewritten, and the names of unknown blocks."""
    lines, out, errors, i = text.split("\n"), [], [], 0
    while i < len(lines):
        out.append(lines[i])
        m = BEGIN.match(lines[i])
        if m:
            j = i + 1
            while j < len(lines) and lines[j].strip() != END:
                j += 1
            if j == len(lines):
                errors.append("%s:%d: block %s has no %s" % (where, i + 1, m.group(1), END))
                return text, errors
            if m.group(1) not in TABLES:
                errors.append("%s:%d: no table named %s (known: %s)"
                              % (where, i + 1, m.group(1), ", ".join(sorted(TABLES))))
                out.extend(lines[i + 1:j])
            else:
                out.extend(TABLES[m.group(1)](root))
            out.append(lines[j])
            i = j
        i += 1
    return "\n".join(out), errors


def paragraphs(text):
    """(first line number, words) of each prose paragraph: code fences and tables left out."""
    out, cur, start, fence = [], [], 0, False
    for n, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            fence = not fence
            continue
        if fence or line.lstrip().startswith("|") or line.lstrip().startswith("<!--"):
            continue
        if not line.strip() or re.match(r"^\s*([-*]|\d+\.)\s", line) or line.startswith("#"):
            if cur:
                out.append((start, len(" ".join(cur).split())))
            cur, start = ([line], n) if line.strip() else ([], 0)
            continue
        if not cur:
            start = n
        cur.append(line)
    if cur:
        out.append((start, len(" ".join(cur).split())))
    return out


def lint(root, path, text):
    rel, errors = os.path.relpath(path, root), []
    limit = MAX_LINES.get(rel)
    n = len(text.rstrip("\n").split("\n"))
    if limit and n > limit:
        errors.append("%s: %d lines, at most %d" % (rel, n, limit))
    for start, words in paragraphs(text):
        if words > MAX_WORDS:
            errors.append("%s:%d: a paragraph of %d words, at most %d" % (rel, start, words, MAX_WORDS))
    for n, line in enumerate(text.split("\n"), 1):
        for word in re.findall(r"\b[0-9a-f]{7,40}\b", line):
            # A run of 7-40 hex digits with letters and digits reads as a commit, resolved or not
            # (a whole 64-digit checksum is not matched).
            if re.search(r"[a-f]", word) and re.search(r"[0-9]", word):
                errors.append("%s:%d: commit hash %s (the record names it, not the docs)"
                              % (rel, n, word))
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.normpath(os.path.join(HERE, "..", "..")))
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the blocks from the records")
    mode.add_argument("--check", action="store_true", help="the default: report what differs")
    a = ap.parse_args()
    root, problems = os.path.abspath(a.root), []
    for path in doc_files(root):
        rel = os.path.relpath(path, root)
        text = open(path).read()
        try:
            new, errors = regenerate(root, text, rel)
        except (OSError, KeyError, ValueError, IndexError, AttributeError) as e:
            print("doc_tables: %s: a record it needs cannot be read: %s: %s"
                  % (rel, type(e).__name__, e), file=sys.stderr)
            return 2
        problems += errors
        if new != text:
            if a.write:
                with open(path, "w") as f:
                    f.write(new)
                print("doc_tables: wrote %s" % rel)
            else:
                problems.append("%s: a generated table differs from the records "
                                "(run launcher/analysis/doc_tables.py --write)" % rel)
        problems += lint(root, path, new if a.write else text)
    for p in problems:
        print("doc_tables: " + p, file=sys.stderr)
    if problems:
        return 1
    print("doc_tables: %d files agree with the records and the rules" % len(doc_files(root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
