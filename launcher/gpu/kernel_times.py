#!/usr/bin/env python3
"""Nsight Compute's CSV (ncu --csv --metrics gpu__time_duration.sum: a row per launch, or with
--print-summary per-kernel a row per kernel) summed by kernel name, largest first:

    launcher/gpu/kernel_times.py profile_ncu.csv [--updates 1]

Prints one line per kernel name: milliseconds per update, share of all kernel time, launches per
update. Lines of the file before the CSV header (ncu's ==PROF== notes, the program's own output)
are skipped."""
import argparse
import csv
import io
import re
import sys
from collections import defaultdict

TO_MS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
         "second": 1e3, "s": 1e3}


def number(text):
    return float(text.replace(",", "")) if text.strip() else 0.0


def column(fields, *names):
    """The first field whose name contains one of names (case-insensitive), else None."""
    for n in names:
        for f in fields:
            if n.lower() in f.lower():
                return f
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--updates", type=int, default=1, help="updates the profile covers")
    a = ap.parse_args()
    lines = open(a.csv, errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit("kernel_times: no CSV header (a line starting with \"ID\") in %s" % a.csv)
    rows = list(csv.DictReader(io.StringIO("\n".join(l for l in lines[start:]
                                                     if l.startswith('"')))))
    fields = list(rows[0].keys()) if rows else []
    name_f = column(fields, "Kernel Name", "Function Name", "Name")
    metric_f = column(fields, "Metric Name")
    unit_f = column(fields, "Metric Unit")
    avg_f = column(fields, "Average")
    value_f = column(fields, "Metric Value")
    calls_f = column(fields, "Invocations")
    total, calls = defaultdict(float), defaultdict(float)
    for r in rows:
        if metric_f and "duration" not in r[metric_f]:
            continue
        scale = TO_MS.get(r.get(unit_f, "ns").strip(), 1e-6) if unit_f else 1e-6
        n = number(r[calls_f]) if calls_f else 1.0
        each = number(r[avg_f]) if avg_f and r.get(avg_f, "").strip() else number(r[value_f])
        name = re.sub(r"\s+", " ", r[name_f])
        total[name] += each * n * scale
        calls[name] += n
    all_ms = sum(total.values())
    print("kernel time per update %.2f ms over %d kernel names (%d launches per update); "
          "ms per update, share, launches per update, kernel" % (
              all_ms / a.updates, len(total), sum(calls.values()) / a.updates))
    for name, ms in sorted(total.items(), key=lambda kv: -kv[1]):
        print("%9.3f %6.1f%% %7.1f  %s" % (ms / a.updates, 100 * ms / all_ms if all_ms else 0,
                                           calls[name] / a.updates, name[:150]))


if __name__ == "__main__":
    main()
