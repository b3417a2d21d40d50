#!/usr/bin/env python3
"""Records and compares the reference runs of tests/cli/reference_runs.sh.

A reference is a directory holding the run's metrics lines (wall-clock fields left out) and the
files of its last checkpoint, as pntrain wrote them.

  record  METRICS CHECKPOINT_DIR REF_DIR          writes REF_DIR from a run
  compare METRICS CHECKPOINT_DIR REF_DIR --exact  the run equals the reference byte for byte
  compare ... --tolerance                         the run equals it within TOLERANCE (below)
  selfcheck METRICS CHECKPOINT_DIR REF_DIR MODE   the comparison sees what it must: a copy of
                                                  the reference with one number changed fails
                                                  both ways; one that lacks an option the run
                                                  has (an option added later) passes; one with
                                                  a recorded option's value changed fails

What is compared:
  metrics      every line and key; integers and strings equal; floats equal (--exact) or
               within a relative TOLERANCE["metric"]
  model.bin    the header as options (each option the reference records must have the same
               value in the run; an option the reference lacks is a newer one, and changes
               nothing unless the numbers change) and its other fields; the payload split by
               the header's parameter table into parameters, Adam's m and Adam's v: equal
               bytes (--exact) or each within a relative L2 distance
  rank<r>.bin  the header and each norm state tensor, likewise
  DONE         equal
The data path is never compared (it depends on where the clone is).
"""
import json
import math
import os
import shutil
import struct
import sys
import tempfile

# Relative tolerances off the recorded CPU, and why. OpenBLAS picks its GEMM kernels by CPU, so
# sums run in another order: measured on the lm and mt runs between OpenBLAS's kernels for Zen
# (the recorded AMD EPYC's), Haswell, Sandybridge, Nehalem, Prescott and the AVX-512 ones
# (SkylakeX, Cooperlake, SapphireRapids: an Intel Xeon's), the losses differ by at most 1e-8
# (relative), Adam's moments by 1.8e-7 and the norms' running state by 1.2e-7 (relative L2), the
# parameters by 6.2e-5 (Adam divides tiny gradients by their own size, so an element with next
# to no gradient moves by up to the learning rate whatever its rounding). A real change exceeds
# these: a learning rate 1% higher moves the losses by 8e-4 and the moments by 4e-3; PN's
# forward momentum 0.9 -> 0.91 moves the losses by 8e-6 and the moments by 8e-4. The tolerances
# sit 16 to 100 times above the CPU noise and below those (a change as small as doubling the
# norms' epsilon, 7e-7 in the losses and 8e-6 in the moments, stays under them).
TOLERANCE = {"metric": 1e-6, "param": 1e-3, "moment": 1e-5, "state": 1e-5}
WALL_CLOCK = ("wall_s", "tokens_per_s", "time", "peak_rss_mb")
PATH_KEYS = ("data",)


def trimmed_metrics(path):
    lines = []
    with open(path) as f:
        for line in f:
            if line.strip():
                j = json.loads(line)
                if "event" in j:  # an attempt's start (provenance) or end: where and when
                    continue
                for k in WALL_CLOCK:
                    j.pop(k, None)
                lines.append(j)
    return lines


def read_file(path):
    """(header, payload bytes) of a pntrain checkpoint file (trainer/checkpoint.h)."""
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack_from("<Q", blob, 8)
    header = json.loads(blob[16:16 + hlen])
    (plen,) = struct.unpack_from("<Q", blob, 16 + hlen)
    return header, blob[24 + hlen:24 + hlen + plen]


def blocks(name, header, payload):
    """[(label, kind, values as floats)] of a checkpoint file's payload."""
    if name == "model.bin":
        n = sum(math.prod(p["shape"]) for p in header["params"])
        vals = struct.unpack("<%df" % (len(payload) // 4), payload)
        return [(label, kind, vals[i * n:(i + 1) * n]) for i, (label, kind) in
                enumerate((("parameters", "param"), ("Adam m", "moment"), ("Adam v", "moment")))]
    if "state" in header:
        total = sum(t["n"] for t in header["state"])
        width = len(payload) // max(1, total)
        fmt = {4: "f", 8: "d"}[width]
        out, at = [], 0
        for t in header["state"]:
            vals = struct.unpack_from("<%d%s" % (t["n"], fmt), payload, at)
            out.append(("layer %d %s" % (t["layer"], t["name"]), "state", vals))
            at += t["n"] * width
        return out
    return []


def rel_l2(a, b):
    num = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))
    den = math.sqrt(sum(y * y for y in b))
    return num / den if den > 0 else num


def compare_header(name, ref, run, problems):
    for part in ("options", "config", "flags"):
        if part not in ref or part not in run:
            continue
        for k, v in ref[part].items():
            if k in PATH_KEYS:
                continue
            if k not in run[part]:
                problems.append("%s: %s '%s' recorded as %s is missing from the run" % (
                    name, part, k, json.dumps(v)))
            elif run[part][k] != v:
                problems.append("%s: %s '%s' is %s, recorded %s" % (
                    name, part, k, json.dumps(run[part][k]), json.dumps(v)))
    for k, v in ref.items():
        if k in ("options", "config", "flags", "best_valid_loss"):
            continue
        if run.get(k) != v:
            problems.append("%s: header '%s' is %s, recorded %s" % (
                name, k, json.dumps(run.get(k))[:200], json.dumps(v)[:200]))


def close(a, b, tol):
    return a == b or abs(a - b) <= tol * max(abs(a), abs(b))


def compare(run_metrics, run_ck, ref_dir, exact):
    """(problems, worst relative difference by kind) of a run against a reference."""
    problems, worst = [], {k: 0.0 for k in TOLERANCE}
    ref_lines = trimmed_metrics(os.path.join(ref_dir, "metrics.jsonl"))
    run_lines = trimmed_metrics(run_metrics)
    if len(ref_lines) != len(run_lines):
        problems.append("metrics: %d lines, recorded %d" % (len(run_lines), len(ref_lines)))
    for i, (r, x) in enumerate(zip(ref_lines, run_lines), 1):
        if sorted(r) != sorted(x):
            problems.append("metrics line %d: keys %s, recorded %s" % (i, sorted(x), sorted(r)))
            continue
        for k, v in r.items():
            w = x[k]
            if isinstance(v, float) and isinstance(w, (int, float)) and not exact:
                d = abs(w - v) / max(abs(v), 1e-300)
                worst["metric"] = max(worst["metric"], d)
                if not close(w, v, TOLERANCE["metric"]):
                    problems.append("metrics line %d: %s %r, recorded %r (relative %.2g > %g)" % (
                        i, k, w, v, d, TOLERANCE["metric"]))
            elif w != v:
                problems.append("metrics line %d: %s %r, recorded %r" % (i, k, w, v))
    ref_ck = os.path.join(ref_dir, "checkpoint")
    names = sorted(os.listdir(ref_ck))
    if sorted(os.listdir(run_ck)) != names:
        problems.append("checkpoint files %s, recorded %s" % (sorted(os.listdir(run_ck)), names))
    for name in names:
        rp, xp = os.path.join(ref_ck, name), os.path.join(run_ck, name)
        if not os.path.exists(xp):
            continue
        if not name.endswith(".bin"):
            with open(rp, "rb") as f1, open(xp, "rb") as f2:
                if f1.read() != f2.read():
                    problems.append("%s differs" % name)
            continue
        rh, rpay = read_file(rp)
        xh, xpay = read_file(xp)
        compare_header(name, rh, xh, problems)
        if "best_valid_loss" in rh:
            a, b = xh.get("best_valid_loss"), rh["best_valid_loss"]
            if not isinstance(a, float) or not (a == b if exact else close(a, b, TOLERANCE["metric"])):
                problems.append("%s: best_valid_loss %r, recorded %r" % (name, a, b))
        if exact:
            if rpay != xpay:
                problems.append("%s: payload differs from the recorded bytes" % name)
            continue
        if len(rpay) != len(xpay):
            problems.append("%s: payload of %d bytes, recorded %d" % (name, len(xpay), len(rpay)))
            continue
        for (label, kind, rv), (_, _, xv) in zip(blocks(name, rh, rpay), blocks(name, xh, xpay)):
            d = rel_l2(xv, rv)
            worst[kind] = max(worst[kind], d)
            if not d <= TOLERANCE[kind]:
                problems.append("%s: %s at relative L2 distance %.2g from the recorded (> %g)" % (
                    name, label, d, TOLERANCE[kind]))
    return problems, worst


def record(run_metrics, run_ck, ref_dir):
    shutil.rmtree(ref_dir, ignore_errors=True)
    os.makedirs(ref_dir)
    with open(os.path.join(ref_dir, "metrics.jsonl"), "w") as f:
        for line in trimmed_metrics(run_metrics):
            f.write(json.dumps(line, sort_keys=True) + "\n")
    shutil.copytree(run_ck, os.path.join(ref_dir, "checkpoint"))


def rewrite_file(path, edit_header=None, edit_payload=None):
    """Rewrites a checkpoint file with its header or payload edited (CRC not recomputed: the
    comparison does not read it)."""
    header, payload = read_file(path)
    if edit_header:
        edit_header(header)
    if edit_payload:
        payload = edit_payload(header, payload)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(b"PNCKPT01" + struct.pack("<Q", len(h)) + h + struct.pack("<Q", len(payload)) +
                payload + b"\0\0\0\0")


def selfcheck(run_metrics, run_ck, ref_dir, exact_too):
    """Edited copies of the reference against the run, compared within tolerance (and byte for
    byte where exact_too: the run is on the recorded CPU): what must fail fails, what must pass
    passes. Returns the failures of this check."""
    bad = []

    def case(what, edit, must_pass):
        tmp = tempfile.mkdtemp()
        try:
            copy = os.path.join(tmp, "ref")
            shutil.copytree(ref_dir, copy)
            edit(copy)
            for exact in (True, False):
                if exact and (must_pass or not exact_too):
                    continue  # an edited reference is not the recorded bytes
                problems, _ = compare(run_metrics, run_ck, copy, exact)
                verdict = "passes" if not problems else "fails"
                ok = (not problems) == must_pass
                print("  %s %s (%s)%s" % ("ok:" if ok else "WRONG:", what, "exact" if exact else
                                          "tolerance", ": " + verdict + (
                                              "" if must_pass else " with: " + problems[0])))
                if not ok:
                    bad.append(what)
        finally:
            shutil.rmtree(tmp)

    def one_metric(copy):
        p = os.path.join(copy, "metrics.jsonl")
        lines = open(p).read().splitlines()
        j = json.loads(lines[-1])
        key = next(k for k, v in j.items() if isinstance(v, float))
        j[key] *= 1 + 1e-5
        lines[-1] = json.dumps(j, sort_keys=True)
        open(p, "w").write("\n".join(lines) + "\n")

    def moments(copy):
        def scale(header, payload):
            n = sum(math.prod(p["shape"]) for p in header["params"])
            vals = list(struct.unpack("<%df" % (len(payload) // 4), payload))
            vals[n:] = [v * (1 + 1e-4) for v in vals[n:]]
            return struct.pack("<%df" % len(vals), *vals)
        rewrite_file(os.path.join(copy, "checkpoint", "model.bin"), edit_payload=scale)

    def drop_option(copy):
        rewrite_file(os.path.join(copy, "checkpoint", "model.bin"),
                     edit_header=lambda h: h["options"].pop(sorted(h["options"])[0]))

    def change_option(copy):
        def edit(h):
            k = "dropout" if "dropout" in h["options"] else sorted(h["options"])[0]
            h["options"][k] = h["options"][k] + "1"
        rewrite_file(os.path.join(copy, "checkpoint", "model.bin"), edit_header=edit)

    case("one metrics number changed by 1e-5 (relative)", one_metric, False)
    case("Adam's moments scaled by 1 + 1e-4", moments, False)
    case("the reference without an option the run has (an option added later)", drop_option, True)
    case("a recorded option's value changed", change_option, False)
    return bad


def main(argv):
    if len(argv) >= 4 and argv[0] == "record":
        record(*argv[1:4])
        return 0
    if len(argv) == 5 and argv[0] == "compare" and argv[4] in ("--exact", "--tolerance"):
        problems, worst = compare(argv[1], argv[2], argv[3], argv[4] == "--exact")
        for p in problems[:20]:
            print("  " + p)
        if argv[4] == "--tolerance":
            print("  largest relative differences: " + ", ".join(
                "%s %.2g (tolerance %g)" % (k, worst[k], TOLERANCE[k]) for k in TOLERANCE))
        return 1 if problems else 0
    if len(argv) == 5 and argv[0] == "selfcheck" and argv[4] in ("--exact", "--tolerance"):
        return 1 if selfcheck(*argv[1:4], exact_too=argv[4] == "--exact") else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
