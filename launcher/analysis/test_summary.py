#!/usr/bin/env python3
"""The end of `launcher/pn test`: what ran, from ctest's JUnit files (ctest --output-junit).

Usage: test_summary.py LABEL=FILE.xml [LABEL=FILE.xml ...] [--not-run LABEL=REASON ...]

Prints, per part (the CPU tests, the CUDA code on the emulator), how many tests passed, failed
and were skipped; then every test skipped on this machine with the reason it gave (the line a
skipping test prints: "skipped: ...", or a GoogleTest GTEST_SKIP message), and every failed
test. A part whose tests never ran (its build failed, say) is named with why. Exit status 1
when any test failed or any part did not run, else 0.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET


def skip_reason(output):
    """The reason a skipped test gave in its output, in one line."""
    lines = [l.strip() for l in output.splitlines()]
    for i, line in enumerate(lines):
        if re.search(r":\d+: Skipped$", line):  # GTEST_SKIP: the message follows
            msg = next((l for l in lines[i + 1:] if l), "")
            if msg and not msg.startswith("[  SKIPPED ]"):
                return msg
    for line in lines:  # "skipped: why", "SKIP: why", "...: SKIPPED on every rank: why"
        m = re.search(r"(?i)\bskip(?:ped)?\b[^:\]]*:\s*(\S.*)", line)
        if m and not line.startswith("[  SKIPPED ]"):
            return m.group(1)
    tail = [l for l in lines if l]
    return tail[-1] if tail else "(it printed no reason)"


def read_part(path):
    """[(name, status, output)] of a ctest JUnit file; status passed, failed or skipped."""
    tests = []
    for case in ET.parse(path).getroot().iter("testcase"):
        out = case.findtext("system-out") or ""
        if case.find("skipped") is not None or case.get("status") == "notrun":
            status = "skipped"
        elif case.find("failure") is not None or case.get("status") == "fail":
            status = "failed"
        else:
            status = "passed"
        tests.append((case.get("name"), status, out))
    return tests


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M)
        return m.group(1).strip() if m else "this machine"
    except OSError:
        return "this machine"


def main(argv):
    parts, not_run = [], []
    it = iter(argv)
    for arg in it:
        if arg == "--not-run":
            label, _, why = next(it, "=").partition("=")
            not_run.append((label, why))
        else:
            label, _, path = arg.partition("=")
            parts.append((label, path))
    skipped, failed, bad = [], [], bool(not_run)
    print("pn test: summary")
    width = max([len(l) for l, _ in parts + not_run] + [10])
    for label, path in parts:
        if not os.path.exists(path):
            print("  %-*s  did not run: no results at %s" % (width, label, path))
            bad = True
            continue
        tests = read_part(path)
        count = {s: sum(1 for _, st, _ in tests if st == s) for s in ("passed", "failed", "skipped")}
        print("  %-*s  %d passed, %d failed, %d skipped (of %d)" % (
            width, label, count["passed"], count["failed"], count["skipped"], len(tests)))
        skipped += [(label, n, skip_reason(o)) for n, st, o in tests if st == "skipped"]
        failed += [(label, n) for n, st, _ in tests if st == "failed"]
    for label, why in not_run:
        print("  %-*s  did not run: %s" % (width, label, why))
    if skipped:
        print("pn test: %d skipped on %s (a skipped test is not a passed one), by reason:" % (
            len(skipped), cpu_name()))
        reasons = {}
        for label, name, why in skipped:
            reasons.setdefault(why, []).append("%s [%s]" % (name.split("  #")[0], label))
        for why, names in reasons.items():
            print("  %s (%d): %s" % (why, len(names), ", ".join(names)))
    else:
        print("pn test: nothing skipped on %s" % cpu_name())
    if failed:
        print("pn test: FAILED: " + ", ".join("%s [%s]" % (n, l) for l, n in failed))
    elif bad:
        print("pn test: not every part ran")
    else:
        print("pn test: every test that ran passed")
    return 1 if failed or bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
