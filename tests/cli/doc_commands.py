#!/usr/bin/env python3
"""Runs every command block of README.md and docs/*.md that is marked runnable, in a short form,
so that the documented commands cannot drift from the program.

A block is marked by the line just above its ```sh fence:
    <!-- doc-test: SED -->
where SED is a sed script (possibly empty) that turns the block into its short form (fewer
updates, say). Each block runs with bash -e in a fresh directory that looks like a clone (the
repository's folders linked, build/ the given build, ../shared beside it), as the user running
the test (root in CI, where a bare `mpirun` is refused), with a `python3` first on PATH that is
not Debian's and has no numpy, as on a machine with another Python. Unmarked blocks (a GPU, a
cluster, hours of training) are not run; the count of each is printed.
Usage: doc_commands.py ROOT BUILD_DIR"""
import glob
import os
import re
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^```")
MARK = re.compile(r"^<!-- doc-test:(.*)-->\s*$")
LINKED = ("launcher", "configs", "python", "bench", "tests", "docs", "kernels", "layers",
          "model", "trainer", "comm", "cmake", "CMakeLists.txt", "README.md")


def blocks(path):
    """(line number, sed script or None, text) of every fenced sh block of a markdown file."""
    out, lines, i = [], open(path).read().split("\n"), 0
    while i < len(lines):
        if lines[i].startswith("```sh"):
            m = MARK.match(lines[i - 1]) if i > 0 else None
            j = i + 1
            while j < len(lines) and not FENCE.match(lines[j]):
                j += 1
            out.append((i + 1, m.group(1).strip() if m else None, "\n".join(lines[i + 1:j])))
            i = j
        i += 1
    return out


def main():
    root, build = (os.path.abspath(p) for p in sys.argv[1:3])
    shared = os.path.normpath(os.path.join(root, "..", "shared"))
    files = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    failures, ran, skipped = 0, 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        fakebin = os.path.join(tmp, "bin")
        os.makedirs(fakebin)
        with open(os.path.join(fakebin, "python3"), "w") as f:
            f.write("#!/bin/sh\necho \"python3 (not Debian's): No module named 'numpy'\" >&2\nexit 1\n")
        os.chmod(os.path.join(fakebin, "python3"), 0o755)
        env = dict(os.environ, PATH=fakebin + os.pathsep + os.environ["PATH"], PN_SKIP_SETUP="1",
                   PN_SKIP_BUILD="1", OMP_NUM_THREADS="1")
        env.pop("PN_BUILD_DIR", None)
        for path in files:
            for n, sed, text in blocks(path):
                where = "%s:%d" % (os.path.relpath(path, root), n)
                if sed is None:
                    skipped += 1
                    continue
                work = os.path.join(tmp, "b%d" % ran)
                clone = os.path.join(work, "repo")
                os.makedirs(clone)
                for name in LINKED:
                    if os.path.exists(os.path.join(root, name)):
                        os.symlink(os.path.join(root, name), os.path.join(clone, name))
                os.symlink(build, os.path.join(clone, "build"))
                os.symlink(shared, os.path.join(work, "shared"))
                short = subprocess.run(["sed", sed], input=text, capture_output=True, text=True,
                                       check=True).stdout if sed else text
                ran += 1
                print("== %s\n%s" % (where, short), flush=True)
                try:
                    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", short], cwd=clone,
                                       env=env, capture_output=True, text=True, timeout=600)
                    rc, out = r.returncode, r.stdout + r.stderr
                except subprocess.TimeoutExpired as e:
                    rc, out = "timeout", str(e)
                if rc != 0:
                    failures += 1
                    print("FAIL: %s exits %s:\n%s" % (where, rc, out[-3000:]), flush=True)
                else:
                    print("ok: %s" % where, flush=True)
    print("doc commands: %d blocks ran, %d failed; %d blocks not marked runnable" % (
        ran, failures, skipped))
    return 1 if failures or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
