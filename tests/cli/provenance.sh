#!/usr/bin/env bash
# A run records where it ran, per attempt: under mpirun -np 2, a run interrupted at update 4 and
# resumed writes two start records (updates 0 and 4) whose provenance holds every key, the
# commit of the source tree (git rev-parse HEAD where it is a checkout), a boolean tree state,
# and the ranks and threads of the startup line; an end record per attempt (interrupted at 4,
# done at 6); the final checkpoint carries the same provenance; --eval-only with --metrics
# appends the test record of the evaluation it printed; a run that fails ends with its record.
# Usage: provenance.sh SOURCE_DIR PNTRAIN MPIRUN...
set -u
src="$1"; shift
. "$(dirname "$0")/common.sh"
model=(--decoder-embed-dim 32 --decoder-ffn-embed-dim 64 --decoder-layers 1 --max-tokens 256
       --tokens-per-sample 32 --log-interval 1 --threads 1 --max-update 6)
small=("${model[@]}" --validate-interval-updates 3 --metrics m.jsonl --save-dir ck)
timeout 300 "${mpirun[@]}" -np 2 "$pntrain" "${small[@]}" --debug-fault sigterm@4 > first.log 2>&1
rc=$?
[ $rc -eq 143 ] || { fail "the interrupted attempt: exit $rc (want 143)"; tail -3 first.log; }
timeout 300 "${mpirun[@]}" -np 2 "$pntrain" "${small[@]}" > second.log 2>&1 ||
  { fail "the resumed attempt: exit $?"; tail -3 second.log; }
timeout 300 "$pntrain" --save-dir ck --eval-only --metrics m.jsonl > eval.log 2>&1 ||
  { fail "--eval-only: exit $?"; tail -3 eval.log; }
commit=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)
"$py" - m.jsonl first.log second.log eval.log ck/checkpoint_6/model.bin "$commit" <<'PY' ||
import json, re, struct, sys
metrics, logs, evallog, model_bin, commit = (sys.argv[1], sys.argv[2:4], sys.argv[4], sys.argv[5],
                                             sys.argv[6])
rows = [json.loads(l) for l in open(metrics) if l.strip()]
keys = ["commit", "tree_clean", "build_type", "build_flags", "device", "cpu_model", "cpu_isa",
        "blas", "gpu_name", "gpu_driver", "cuda", "cudnn", "nccl", "precision", "ranks",
        "threads", "host"]
starts = [r for r in rows if r.get("event") == "start"]
ends = [r for r in rows if r.get("event") == "end"]
assert [s["update"] for s in starts] == [0, 4], ("start records", starts)
for s, log in zip(starts, logs):
    p = s["provenance"]
    missing = [k for k in keys if k not in p]
    assert not missing, ("provenance lacks", missing)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", s["time"]), s["time"]
    assert p["commit"] == commit, ("commit", p["commit"], "git rev-parse HEAD", commit)
    if commit != "unknown":
        assert isinstance(p["tree_clean"], bool), ("tree_clean", p["tree_clean"])
    text = open(log).read()
    ranks, threads = map(int, re.search(r"ranks (\d+) .*threads per rank (\d+)", text).groups())
    assert (p["ranks"], p["threads"]) == (ranks, threads) == (2, 1), (p["ranks"], p["threads"])
    assert p["device"] == "cpu" and p["precision"] == "fp32" and p["gpu_name"] is None, p
    line = re.search(r"build: commit (\S+) .*", text).group(0)
    core = p["blas"][p["blas"].index(", core "):]
    assert p["commit"].startswith(line.split()[2]) and line.endswith(core), (line, p["blas"])
assert [(e["update"], e["reason"]) for e in ends] == [(4, "interrupted"), (6, "done")], ends
assert rows.index(ends[0]) < rows.index(starts[1]), "the first attempt's end after the resume"
with open(model_bin, "rb") as f:
    blob = f.read()
(hlen,) = struct.unpack_from("<Q", blob, 8)
header = json.loads(blob[16:16 + hlen])
assert header.get("provenance") == starts[1]["provenance"], header.get("provenance")
tests = [r for r in rows if "test_loss" in r]
ppl = float(re.search(r"test loss [0-9.]+ ppl ([0-9.]+)", open(evallog).read()).group(1))
assert len(tests) == 1 and tests[0]["update"] == 6 and rows[-1] is tests[0], tests
assert abs(tests[0]["test_ppl"] - ppl) < 0.006, (tests[0], ppl)
print("ok: starts at %s, ends %s, commit %s (tree clean: %s), ranks %d, threads %d, test ppl %.2f"
      % ([s["update"] for s in starts], [(e["update"], e["reason"]) for e in ends],
         starts[0]["provenance"]["commit"][:10], starts[0]["provenance"]["tree_clean"],
         starts[0]["provenance"]["ranks"], starts[0]["provenance"]["threads"], ppl))
PY
  fail "the records (above)"
# A run that fails (a NaN loss it gives up on) ends with a failed record at its last update.
timeout 300 "$pntrain" "${model[@]}" --metrics f.jsonl --debug-fault nan@3 --max-bad-updates 1 \
  > failed.log 2>&1
rc=$?
last=$(tail -n 1 f.jsonl)
want='{"event":"end","reason":"failed","time":"'*'","update":2}'
if [ $rc -ne 2 ] || [[ "$last" != $want ]]; then
  fail "a failed run: exit $rc (want 2), last record $last"
else echo "ok: a failed run ends with $last"; fi
[ $failures -eq 0 ] && echo "provenance: all checks passed"
exit $((failures > 0))
