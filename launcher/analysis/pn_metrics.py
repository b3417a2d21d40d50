"""Shared by the launcher scripts (ablate.py, bench.py, plot.py, reproduce.py): reading pntrain
--metrics files (JSONL), comma-separated flag values, and running a cell with its progress."""
import gzip
import json
import os
import re
import subprocess
import sys
import time

# Seconds between two progress lines of a running cell (PN_PROGRESS_S overrides).
PROGRESS_S = float(os.environ.get("PN_PROGRESS_S", "60"))


def registry_norms(pntrain):
    """The norm names of pntrain's registry (`pntrain --list-norms`, one JSON object a line);
    raises OSError or subprocess.CalledProcessError where pntrain cannot say."""
    out = subprocess.run([pntrain, "--list-norms"], capture_output=True, text=True,
                         check=True).stdout
    return [json.loads(line)["name"] for line in out.splitlines() if line.strip()]


def open_metrics(path):
    """PATH opened for reading, or PATH.gz (a committed file over 2 MB) when only that exists;
    None when neither does."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        return gzip.open(path + ".gz", "rt")
    return open(path) if os.path.exists(path) else None


def read_metrics(path, warn=False):
    """Returns (update lines, validation lines) of a metrics file; ([], []) when it is missing.
    Lines that are not JSON (a line cut by an interrupted run) are skipped, with a message on
    stderr when warn is set, and so are the records of an attempt's start and end ("event") and
    of a test evaluation ("test_loss"). A committed file over 2 MB is kept as PATH.gz, read the
    same."""
    updates, valids = [], []
    opened = open_metrics(path)
    if opened is None:
        return updates, valids
    with opened as f:
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
            if "event" in j or ("test_loss" in j and "valid_loss" not in j):
                continue  # start/end records and test records: read_records
            (valids if "valid_loss" in j else updates).append(j)
    return updates, valids


def read_records(path):
    """Every JSON record of a metrics file (PATH or PATH.gz), in order; [] when missing."""
    opened = open_metrics(path)
    if opened is None:
        return []
    out = []
    with opened as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


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


def last_progress(log_path):
    """'update N/M | epoch E | ... | eta T' of the newest progress line in a pntrain log, shortened
    to its update, epoch and eta ("" when there is none yet)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            tail = f.read().decode(errors="replace")
    except OSError:
        return ""
    found = re.findall(r"update (\d+)/(\d+) \| epoch ([0-9.]+) .*?\| eta (\S+)", tail)
    if not found:
        return ""
    u, total, epoch, eta = found[-1]
    return "update %s/%s (%.0f%%), epoch %s, eta %s" % (u, total, 100.0 * int(u) / max(1, int(total)),
                                                      epoch, eta)


def run_with_progress(cmd, log_path, tag, mode="w"):
    """Runs cmd with its output in log_path; every PROGRESS_S seconds prints '<tag>: <the newest
    progress line, shortened>' so that a long cell shows where it is. Returns the exit status."""
    with open(log_path, mode) as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        t0 = time.time()
        while True:
            try:
                return proc.wait(timeout=PROGRESS_S)
            except subprocess.TimeoutExpired:
                line = last_progress(log_path)
                print("%s: %s (%.0f min in)" % (tag, line or "starting", (time.time() - t0) / 60),
                      flush=True)
            except BaseException:  # interrupted: the cell's processes end with this script
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                raise
