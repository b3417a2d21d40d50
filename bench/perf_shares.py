#!/usr/bin/env python3
"""Where a pntrain run's CPU time goes, by category, from `perf report` of one or more
perf.data files (bench/profile.sh records them). Prints a Markdown table, one column per file.

Usage: perf_shares.py A.data [B.data ...]
"""
import collections
import re
import subprocess
import sys


def shares(f):
    """Percent of samples per category (self time)."""
    out = subprocess.run(["perf","report","-i",f,"--sort","dso,symbol","--stdio"],capture_output=True,text=True).stdout
    cat = collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)", line)
        if not m: continue
        pct, dso, kind, sym = float(m.group(1)), m.group(2), m.group(3), m.group(4).strip()
        if "openblas" in dso: c = "GEMM (OpenBLAS)"
        elif kind == "k": c = "kernel (page faults, VM)"
        elif "gomp" in dso: c = "OpenMP runtime"
        elif re.search(r"softmax_xent|row_loss|exp_sum|exp@|__ieee754_exp|__expf|expf", sym) or (dso.startswith("libm") and "exp" in sym): c = "loss (softmax+xent)"
        elif re.search(r"relu|bias|dropout|::add|copy|scale", sym): c = "element-wise (bias, relu, dropout, residual)"
        elif re.search(r"norm|column_|rowgroup", sym, re.I): c = "norms"
        elif "attention" in sym: c = "attention (softmax, masks)"
        elif "adam" in sym or "sum_squares" in sym: c = "optimizer + grad norm"
        elif re.search(r"memset|memmove|memcpy|fill|malloc|free|_M_default_append", sym): c = "memset/memcpy/alloc"
        elif re.search(r"corpus|Vocabulary|split_lines|istream|string|normal_distribution|mersenne|LanguageModel<float>::LanguageModel", sym): c = "startup (corpus, init)"
        else: c = "other"
        cat[c] += pct
    return cat
if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
    print(__doc__)
    sys.exit(0 if len(sys.argv) > 1 else 2)
files = sys.argv[1:]
tables = [shares(f) for f in files]
keys = sorted(set().union(*tables), key=lambda k: -tables[-1].get(k, 0))
print("| where the time goes | " + " | ".join(files) + " |")
print("|---" * (len(files) + 1) + "|")
for k in keys:
    print("| %s | " % k + " | ".join("%.1f%%" % t.get(k, 0) for t in tables) + " |")
