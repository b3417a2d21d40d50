"""The provenance of a reproduction cell (what commit, build, device and host ran each attempt)
and the rule of every report over cells: it never pools cells whose provenance differs in
anything but the seed unless --allow-mixed names the field, and then it says what was mixed.

A cell's provenance comes from the "start" records pntrain writes into its metrics.jsonl at
each start and resume; a cell run before those records existed is recovered from its
train.log's startup lines (device, GPU, driver, CUDA runtime, GEMM precision, OpenBLAS kernel
where the log names it, ranks, threads) and from a provenance.json beside it (fields recovered
from the record of the run, each with its source); every other field is "unknown", which
equals no known value."""
import json
import os
import re
import sys

from pn_metrics import read_records

FIELDS = ("commit", "tree_clean", "build_type", "build_flags", "device", "cpu_model", "cpu_isa",
          "blas", "gpu_name", "gpu_driver", "cuda", "cudnn", "nccl", "precision", "ranks",
          "threads", "host")
UNKNOWN = "unknown"


def _text(v):
    return UNKNOWN if v is None or v == "" else str(v)


def from_train_log(path):
    """[{field: value}] per attempt of a train.log (one per 'device:' startup line)."""
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    attempts = []
    for line in lines:
        if line.startswith("device: "):
            p = {}
            m = re.match(r"device: cuda:\d+ (.+?) \(.*?\), driver ([0-9.]+), runtime ([0-9.]+)"
                         r"(?:, GEMMs in (\w+))?", line)
            if m:
                p.update(device="cuda", gpu_name=m.group(1), gpu_driver=m.group(2),
                         cuda=m.group(3), precision=m.group(4) or UNKNOWN)
            elif line.startswith("device: cpu"):
                p["device"] = "cpu"
                k = re.search(r"OpenBLAS kernels (\w+)( \(OPENBLAS_CORETYPE set)?", line)
                if k:
                    p["blas"] = "OpenBLAS %s%s" % (k.group(1), " (OPENBLAS_CORETYPE)"
                                                    if k.group(2) else "")
            attempts.append(p)
        elif attempts and line.startswith("ranks "):
            m = re.match(r"ranks (\d+) .*threads per rank (\d+)", line)
            if m:
                attempts[-1].update(ranks=int(m.group(1)), threads=int(m.group(2)))
    return attempts


def cell_attempts(cell_dir):
    """([{field: value}] per attempt, [start times], where the provenance came from)."""
    starts = [r for r in read_records(os.path.join(cell_dir, "metrics.jsonl"))
              if r.get("event") == "start"]
    if starts:
        return ([r.get("provenance") or {} for r in starts],
                [r.get("time") for r in starts if r.get("time")], "metrics.jsonl")
    attempts = from_train_log(os.path.join(cell_dir, "train.log")) or [{}]
    source = "train.log"
    try:
        with open(os.path.join(cell_dir, "provenance.json")) as f:
            recovered = json.load(f)
        for p in attempts:
            p.update({k: v for k, v in recovered.items() if k in FIELDS})
        source = "train.log and provenance.json (%s)" % recovered.get("source", "recovered")
    except (OSError, ValueError):
        pass
    return attempts, [], source


def cell_provenance(cell_dir):
    """{field: value} of a cell; a field that differs between its attempts reads
    'A + B' (the cell itself is mixed), one no attempt records reads 'unknown'."""
    attempts, times, source = cell_attempts(cell_dir)
    out = {}
    for f in FIELDS:
        vals = sorted({_text(p.get(f)) for p in attempts})
        out[f] = " + ".join(vals)
    out["_times"] = times
    out["_source"] = source
    return out


def short(name):
    """A cell's name in a message: its last two path parts."""
    parts = os.path.normpath(name).split(os.sep)
    return "/".join(parts[-2:])


def check_pool(cells, allow_mixed, who):
    """The provenance the cells [(name, cell_dir)] share. A field whose value differs between
    cells (or within a cell's attempts) stops the report with one line naming the field and
    the cells (exit 2) unless allow_mixed holds it; then it is listed as mixed. Returns
    {"fields": {field: value}, "mixed": [fields], "values": {field: {value: [names]}},
     "cells": n, "sources": {source: n}, "times": [...]}."""
    provs = [(name, cell_provenance(d)) for name, d in cells]
    fields, mixed, values = {}, [], {}
    for f in FIELDS:
        by = {}
        for name, p in provs:
            by.setdefault(p[f], []).append(name)
        values[f] = by
        differ = len(by) > 1 or any(" + " in v for v in by)
        if differ and f not in allow_mixed:
            print("%s: error: the cells differ in %s: %s; pass --allow-mixed %s to pool them" % (
                who, f, "; ".join("%s in %s" % (v, ", ".join(short(n) for n in ns))
                                  for v, ns in sorted(by.items())), f), file=sys.stderr)
            sys.exit(2)
        if differ:
            mixed.append(f)
            fields[f] = "mixed"
        else:
            fields[f] = next(iter(by)) if by else UNKNOWN
    sources = {}
    for _, p in provs:
        sources[p["_source"]] = sources.get(p["_source"], 0) + 1
    return {"fields": fields, "mixed": mixed, "values": values, "cells": len(provs),
            "sources": sources, "times": sorted(t for _, p in provs for t in p["_times"])}


def describe(pooled):
    """Markdown lines on what the pooled cells share, what was mixed, and what is unknown."""
    if not pooled or not pooled["cells"]:
        return []
    f = pooled["fields"]
    known = ["%s %s" % (k, f[k]) for k in FIELDS if f[k] not in (UNKNOWN, "mixed")]
    unknown = [k for k in FIELDS if f[k] == UNKNOWN]
    L = ["Provenance of the %d pooled cells (from %s): %s." % (
        pooled["cells"], ", ".join("%s for %d" % (s, n) for s, n in sorted(pooled["sources"].items())),
        ", ".join(known) if known else "nothing recorded")]
    if unknown:
        L.append("Unknown for these cells (not recorded when they ran): %s." % ", ".join(unknown))
    for k in pooled["mixed"]:
        L.append("**Pooled across differing %s** (--allow-mixed %s): %s." % (
            k, k, "; ".join("%s: %d cell(s) (%s)" % (v, len(ns), ", ".join(short(n) for n in ns))
                            for v, ns in sorted(pooled["values"][k].items()))))
    return L
