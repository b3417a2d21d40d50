"""Shared by the launcher scripts (ablate.py, bench.py, plot.py): reading pntrain --metrics
files (JSONL) and comma-separated flag values."""
import json
import os
import sys


def read_metrics(path, warn=False):
    """Returns (update lines, validation lines) of a metrics file; ([], []) when it is missing.
    Lines that are not JSON (a line cut by an interrupted run) are skipped, with a message on
    stderr when warn is set."""
    updates, valids = [], []
    if not os.path.exists(path):
        return updates, valids
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                j = json.loads(line)
            except ValueError:
                if warn:
                    print("%s:%d: not JSON, skipped" % (path, n), file=sys.stderr)
                continue
            (valids if "valid_loss" in j else updates).append(j)
    return updates, valids


def int_list(text, what):
    """The positive integers of a comma-separated flag value; ValueError naming the flag."""
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError("%s '%s' must be comma-separated integers" % (what, text))
    if not vals or any(v <= 0 for v in vals):
        raise ValueError("%s '%s' must be positive integers" % (what, text))
    return vals


def split_passthrough(argv):
    """(the script's own arguments, the pntrain flags after "--")."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []
