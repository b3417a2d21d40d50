#!/usr/bin/python3
"""The reports' statistics, provenance rule and protocol, with a stand-in pntrain (a script that
writes the metrics, logs and evaluation lines reproduce.py reads, with test perplexities fixed
per norm and seed, and a start record naming the commit it is given):
  1. the report's Welch interval, p and Holm's adjusted p over the declared family equal
     scipy's and statsmodels' on those values (and the adjusted p is not the raw one);
  2. cells of two commits: the report refuses them with one line naming the field and both
     commits (exit 2); --allow-mixed commit pools them and the report says so; seed_stats.py
     the same; a field one cell does not record ("unknown") is refused beside a known value;
  3. PLAN.json exists when the first cell starts, REPORT.md quotes it with its sha256 digest,
     and names the cells the plan did not list; report.json has the docs' keys and no paper
     numbers on a corpus that is not the paper's.
Usage: reproduce_stats.py REPO_ROOT"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), "..", ".."))
ANALYSIS = os.path.join(ROOT, "launcher", "analysis")
sys.path.insert(0, ANALYSIS)
import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402
from statsmodels.stats.multitest import multipletests  # noqa: E402

# Test perplexity of each (norm, seed): three norms against LN, so the family has three.
VALUES = {"layer": [122.39, 122.47, 122.28], "batch": [120.75, 121.79, 121.03],
          "power_v": [119.86, 119.41, 120.57], "power": [121.38, 120.34, 120.58]}

STANDIN = r'''#!/usr/bin/python3
import json, os, sys
argv = sys.argv[1:]
def flag(name, default=None):
    v = default
    for i, x in enumerate(argv):
        if x == name and i + 1 < len(argv):
            v = argv[i + 1]
    return v
metrics = flag("--metrics")
cell = os.path.dirname(metrics)
out = os.path.dirname(os.path.dirname(cell))
norm, seed = flag("--norm"), int(flag("--seed"))
key = norm + ("" if flag("--pn-variant") in (None, "paper") else "_" + flag("--pn-variant"))
values = json.load(open(os.environ["STANDIN_VALUES"]))
test = values[key][seed - 1]
with open(os.path.join(out, "standin_calls.txt"), "a") as f:
    f.write("%s %d plan=%d\n" % (key, seed, os.path.exists(os.path.join(out, "PLAN.json"))))
if "--eval-only" in argv:
    print("valid loss 4.8 ppl %.2f | test loss 4.7 ppl %.2f" % (test + 4.0, test))
    sys.exit(0)
n = int(flag("--max-update", "6"))
print("device: cpu (1 threads of 2 cores)")
print("ranks 1 (single), threads per rank 1, tokens per update 512")
with open(metrics, "a") as f:
    f.write(json.dumps({"event": "start", "update": 0, "time": "2026-12-01T00:00:00Z",
                        "provenance": {"commit": os.environ["STANDIN_COMMIT"], "device": "cpu",
                                       "ranks": 1, "threads": 1, "host": "standin"}}) + "\n")
    for u in range(1, n + 1):
        f.write(json.dumps({"update": u, "loss": 5.0, "nll_loss": 5.0, "wall_s": 0.01}) + "\n")
        if u % 3 == 0 or u == n:
            # the best validation before the last: no cell is capped
            ppl = test + 4.0 + (0.5 if u == n else 0.0)
            f.write(json.dumps({"update": u, "valid_loss": 4.8, "valid_ppl": ppl}) + "\n")
    f.write(json.dumps({"event": "end", "update": n, "time": "2026-12-01T00:01:00Z",
                        "reason": "done"}) + "\n")
'''

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what)


def run(args, env):
    p = subprocess.run(["/usr/bin/python3", os.path.join(ANALYSIS, "reproduce.py")] + args,
                       capture_output=True, text=True, env=env, timeout=300)
    return p.returncode, p.stdout + p.stderr


tmp = tempfile.mkdtemp()
try:
    pntrain = os.path.join(tmp, "pntrain")
    with open(pntrain, "w") as f:
        f.write(STANDIN)
    os.chmod(pntrain, 0o755)
    with open(os.path.join(tmp, "values.json"), "w") as f:
        json.dump(VALUES, f)
    config = os.path.join(tmp, "quick.ini")
    shutil.copy(os.path.join(ROOT, "configs", "ablate_quick.ini"), config)
    env = dict(os.environ, STANDIN_VALUES=os.path.join(tmp, "values.json"),
               STANDIN_COMMIT="aaaa111", PN_PROGRESS_S="600")
    out = os.path.join(tmp, "rp")
    base = ["--pntrain", pntrain, "--config", config, "--data", "builtin", "--no-ablation",
            "--norms", "layer,batch,power_v,power", "--out", out]
    extra = ["--", "--max-update", "6"]

    # 3. the plan before the first cell
    rc, text = run(base + ["--seeds", "1,2"] + extra, env)
    check(rc == 0, "first run: exit %d: %s" % (rc, text[-2000:]))
    calls = open(os.path.join(out, "standin_calls.txt")).read().split("\n")
    check(calls[0].endswith("plan=1"), "PLAN.json was not there at the first cell: %s" % calls[0])
    plan = json.load(open(os.path.join(out, "PLAN.json")))
    check(plan["seeds"] == [1, 2] and plan["norms"] == ["layer", "batch", "power_v", "power"] and
          plan["correction"].startswith("holm") and plan["family"] == "each norm against LN",
          "PLAN.json content: %s" % plan)

    # 2. a third seed from another commit
    env_b = dict(env, STANDIN_COMMIT="bbbb222")
    rc, text = run(base + ["--seeds", "3"] + extra, env_b)
    check(rc == 0, "seed 3 run: exit %d: %s" % (rc, text[-2000:]))
    digest = "sha256:" + hashlib.sha256(open(os.path.join(out, "PLAN.json"), "rb").read()).hexdigest()
    rc, text = run(base + ["--seeds", "1,2,3", "--report-only"] + extra, env)
    lines = [x for x in text.splitlines() if "differ in commit" in x]
    check(rc == 2 and len(lines) == 1 and "aaaa111" in lines[0] and "bbbb222" in lines[0] and
          "table/layer_s3" in lines[0] and "--allow-mixed commit" in lines[0],
          "two commits not refused by one line naming both: exit %d: %s" % (rc, text[-2000:]))
    rc, text = run(base + ["--seeds", "1,2,3", "--report-only", "--allow-mixed", "commit"] + extra,
                   env)
    check(rc == 0, "--allow-mixed commit: exit %d: %s" % (rc, text[-2000:]))
    report = open(os.path.join(out, "REPORT.md")).read()
    check(re.search(r"\*\*Pooled across differing commit\*\* \(--allow-mixed commit\): "
                    r"aaaa111: 8 cell\(s\) .*; bbbb222: 4 cell\(s\)", report) is not None,
          "the report does not mark the pooled commits: %s" % report[:1500])
    rj = json.load(open(os.path.join(out, "report.json")))
    check(rj["provenance"]["mixed"] == ["commit"] and rj["provenance"]["commit"] == "mixed",
          "report.json provenance: %s" % rj["provenance"])
    ss = subprocess.run(["/usr/bin/python3", os.path.join(ANALYSIS, "seed_stats.py"), "PN",
                         os.path.join(out, "table", "power_s*"), "LN",
                         os.path.join(out, "table", "layer_s*")], capture_output=True, text=True)
    check(ss.returncode == 2 and "differ in commit" in ss.stderr and "bbbb222" in ss.stderr,
          "seed_stats over two commits: exit %d: %s" % (ss.returncode, ss.stderr))
    ss = subprocess.run(["/usr/bin/python3", os.path.join(ANALYSIS, "seed_stats.py"),
                         "--allow-mixed", "commit", "PN", os.path.join(out, "table", "power_s*"),
                         "LN", os.path.join(out, "table", "layer_s*")],
                        capture_output=True, text=True)
    check(ss.returncode == 0 and "Pooled across differing commit" in ss.stdout,
          "seed_stats --allow-mixed commit: exit %d: %s%s" % (ss.returncode, ss.stdout, ss.stderr))

    # An unknown field is no known value: a cell without start records (as cells run before
    # pntrain wrote them) against cells that name their host.
    cell = os.path.join(out, "table", "batch_s1", "metrics.jsonl")
    kept = open(cell).read()
    with open(cell, "w") as f:
        f.write("".join(x + "\n" for x in kept.splitlines() if '"event"' not in x))
    rc, text = run(base + ["--seeds", "1,2,3", "--report-only", "--allow-mixed", "commit"] + extra,
                   env)
    check(rc == 2 and re.search(r"differ in host: standin in .*; unknown in table/batch_s1", text),
          "an unknown host pooled with a known one: exit %d: %s" % (rc, text[-1500:]))
    with open(cell, "w") as f:
        f.write(kept)

    # 3 (cont.). The plan quoted with its digest; the cells it did not list named.
    check("`PLAN.json` (%s)" % digest in report, "REPORT.md does not quote PLAN.json's digest %s"
          % digest)
    check(rj["plan"] == {"file": "PLAN.json", "digest": digest}, "report.json plan: %s" % rj["plan"])
    m = re.search(r"\*\*Cells the plan did not list\*\*[^:]*: (.*)\.", report)
    check(m is not None and "layer seed 1" in m.group(1) and "power seed 2" in m.group(1) and
          "seed 3" not in m.group(1), "cells outside the plan: %s" % (m and m.group(1)))
    keys = {"schema", "run", "title", "task", "budget", "corpus", "metric", "plan", "provenance",
            "groups", "families", "findings", "paper"}
    check(set(rj) == keys, "report.json keys: %s" % sorted(rj))
    check(rj["paper"] is None and "paper test ppl" not in report,
          "a paper column on the builtin corpus")

    # 1. the statistics against scipy's and statsmodels' on the same values
    ref = VALUES["layer"]
    keys3 = ["batch", "power_v", "power"]
    raw = [stats.ttest_ind(VALUES[k], ref, equal_var=False).pvalue for k in keys3]
    holm = multipletests(raw, method="holm")[1]
    comps = {c["group"]: c for c in rj["families"][0]["comparisons"]}
    for k, p, q in zip(keys3, raw, holm):
        a, b = np.array(VALUES[k]), np.array(ref)
        va, vb = a.var(ddof=1) / 3, b.var(ddof=1) / 3
        df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 2)
        half = stats.t.ppf(0.975, df) * np.sqrt(va + vb)
        d = a.mean() - b.mean()
        c = comps[k]
        check(abs(c["p"] - p) < 1e-4 and abs(c["p_adj"] - q) < 1e-4 and
              abs(c["ci95"][0] - (d - half)) < 1e-3 and abs(c["ci95"][1] - (d + half)) < 1e-3,
              "%s: report %s against scipy p %.4f Holm %.4f CI [%.3f, %.3f]" % (
                  k, c, p, q, d - half, d + half))
        check(abs(c["p_adj"] - c["p"]) > 1e-3, "%s: the adjusted p is the raw one" % k)
        label = {"batch": "BN", "power_v": "PN-V", "power": "PN (paper)"}[k]
        row = re.search(r"^\| %s \| 3 \| [^|]* \| [^|]* \| \[([-+][0-9.]+), ([-+][0-9.]+)\] \| "
                        r"([0-9.]+) \| ([0-9.]+) \|" % re.escape(label), report, re.M)
        check(row is not None and abs(float(row.group(1)) - (d - half)) < 0.006 and
              abs(float(row.group(2)) - (d + half)) < 0.006 and
              abs(float(row.group(3)) - p) < 6e-4 and abs(float(row.group(4)) - q) < 6e-4,
              "%s: REPORT.md row %s against scipy p %.4f Holm %.4f" % (
                  label, row and row.group(0), p, q))
    check(any("after Holm over three norms" in f for f in rj["findings"]),
          "no finding at its family-wise strength: %s" % rj["findings"])
finally:
    shutil.rmtree(tmp, ignore_errors=True)

if failures:
    print("%d failure(s)" % len(failures))
    sys.exit(1)
print("reproduce stats: all passed")
