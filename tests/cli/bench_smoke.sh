#!/usr/bin/env bash
# Smoke test of the scaling benchmark (launcher/analysis/bench.py driving pnbench under mpirun): a tiny
# model, a few updates, ranks 1,2, strong and weak. The CSV has every column and one row per
# (mode, norm, ranks) with the token split of its mode, efficiency 1 at one rank, statistics
# all-reduce time only for the synchronized norm at 2 ranks; a run beyond the cores is marked
# oversubscribed; pnbench refuses the flags it sets itself. Timings are never asserted.
# Usage: bench_smoke.sh PNBENCH [MPIRUN]
set -u
pnbench="$1"
mpirun="${2:-mpirun}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bench="$here/../../launcher/analysis/bench.py"
py=/usr/bin/python3; [ -x "$py" ] || py=python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures+1)); }
# GNU nproc reports OMP_NUM_THREADS when it is set; the cores are what pnbench compares with.
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
tiny=(--decoder-layers 1 --decoder-embed-dim 32 --decoder-attention-heads 2
      --decoder-ffn-embed-dim 64 --tokens-per-sample 32)

"$py" "$bench" --pnbench "$pnbench" --ranks 1,2 --norms layer,sync_batch --modes strong,weak \
  --tokens 512 --warmup 1 --measure 3 --out "$tmp/b" -- "${tiny[@]}"
rc=$?
[ $rc -eq 0 ] || fail "bench.py: exit $rc"
csv="$tmp/b/bench.csv"
if [ ! -f "$csv" ]; then fail "no $csv"; else
  cat "$csv"
  "$py" - "$csv" "$cores" <<'PY' || fail "CSV check"
import csv, math, sys
want = ["norm", "device", "mode", "ranks", "cores", "threads", "oversubscribed", "tokens_per_rank",
        "update_freq", "tokens_per_update", "warmup_updates", "measured_updates", "tokens_per_s",
        "speedup", "efficiency", "update_ms", "compute_ms", "stats_allreduce_ms",
        "grad_allreduce_exposed_ms", "optimizer_ms", "other_ms", "sync_group_size",
        "stats_allreduces_per_update", "stats_bytes_per_update", "grad_allreduce_ms",
        "stats_wait_ms", "stats_transfer_ms", "note"]
f = open(sys.argv[1])
reader = csv.DictReader(f)
rows, cores, ok = list(reader), int(sys.argv[2]), True
def bad(msg):
    global ok
    print(msg); ok = False
if reader.fieldnames != want:
    bad("columns %s, want %s" % (reader.fieldnames, want))
cells = sorted((r["mode"], r["norm"], int(r["ranks"])) for r in rows)
if cells != sorted((m, n, r) for m in ("strong", "weak") for n in ("layer", "sync_batch")
                   for r in (1, 2)):
    bad("rows %s" % cells)
for r in rows:
    R = int(r["ranks"])
    for col in ("tokens_per_s", "speedup", "efficiency", "update_ms", "compute_ms"):
        v = float(r[col] or "nan")
        if not (math.isfinite(v) and v > 0):
            bad("%s not positive: %s" % (col, r))
    if R == 1 and (float(r["efficiency"]) != 1.0 or float(r["speedup"]) != 1.0):
        bad("speedup and efficiency at 1 rank are not 1: %s" % r)
    # Both columns are written to 4 decimals: their rounding (half a unit of the 4th decimal
    # each, R times for efficiency * R) is allowed on top of the relative 1e-3.
    if abs(float(r["efficiency"]) * R - float(r["speedup"])) > \
            1e-3 * float(r["speedup"]) + 0.5e-4 * (R + 1):
        bad("efficiency is not speedup / ranks: %s" % r)
    per_rank = 512 // R if r["mode"] == "strong" else 512
    if int(r["tokens_per_rank"]) != per_rank:
        bad("tokens_per_rank %s, want %d: %s" % (r["tokens_per_rank"], per_rank, r))
    if int(r["measured_updates"]) != 3 or int(r["warmup_updates"]) != 1:
        bad("updates: %s" % r)
    if r["oversubscribed"] != ("1" if R > cores else "0"):
        bad("oversubscribed flag at %d ranks on %d cores: %s" % (R, cores, r))
    stats = float(r["stats_allreduce_ms"])
    if r["norm"] == "layer" and stats != 0:
        bad("layer has no statistics all-reduce, got %s ms" % stats)
    if r["norm"] == "sync_batch" and R == 2 and not stats > 0:
        bad("sync_batch at 2 ranks shows no statistics all-reduce time: %s" % r)
    # Counts, not timings: 1 layer x 2 norm places + the final norm, 2 sums each (forward,
    # backward) per micro-step; none for layer or at one rank.
    count = float(r["stats_allreduces_per_update"])
    want = 6 if (r["norm"] == "sync_batch" and R == 2) else 0
    if count != want:
        bad("stats_allreduces_per_update %s, want %d: %s" % (count, want, r))
    if (float(r["stats_bytes_per_update"]) > 0) != (want > 0):
        bad("stats_bytes_per_update: %s" % r)
    if int(r["sync_group_size"]) != R:
        bad("sync_group_size %s at %d ranks (default: all ranks): %s" % (r["sync_group_size"], R, r))
    if R == 2 and not float(r["grad_allreduce_ms"]) > 0:
        bad("no gradient all-reduce time at 2 ranks: %s" % r)
# Target tokens per update: fixed in strong scaling, proportional to the ranks in weak.
tpu = {(r["mode"], r["norm"], int(r["ranks"])): int(r["tokens_per_update"]) for r in rows}
for n in ("layer", "sync_batch"):
    if tpu.get(("strong", n, 2)) != tpu.get(("strong", n, 1)):
        bad("strong %s: tokens per update changed with the ranks" % n)
    if tpu.get(("weak", n, 2)) != 2 * tpu.get(("weak", n, 1), -1):
        bad("weak %s: tokens per update did not double at 2 ranks" % n)
sys.exit(0 if ok else 1)
PY
fi
if "$py" -c "import matplotlib" 2>/dev/null; then
  [ -s "$tmp/b/bench.png" ] || fail "matplotlib is installed but there is no bench.png"
fi

# More ranks than cores still runs, and the row says its timings are not scaling figures.
np=$(( cores + 1 ))
if [ "$np" -le 9 ]; then
  "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np "$np" -x OMP_NUM_THREADS=1 \
    "$pnbench" --mode weak --tokens 64 --warmup 1 --measure 2 --csv "$tmp/over.csv" \
    --norm power "${tiny[@]}" > "$tmp/over.log" 2>&1 || fail "$np ranks: exit $?: $(tail -3 "$tmp/over.log")"
  grep -q "OVERSUBSCRIBED" "$tmp/over.log" || fail "$np ranks on $cores cores not flagged: $(cat "$tmp/over.log")"
  grep -q ",1,.*oversubscribed: $np ranks on $cores cores; not a scaling figure$" "$tmp/over.csv" ||
    fail "oversubscribed row: $(cat "$tmp/over.csv")"
else
  echo "($np ranks would be needed to oversubscribe this machine; that part is skipped)"
fi

# The batch and the update count are pnbench's: giving them as pntrain flags is refused.
out=$("$pnbench" --max-tokens 64 2>&1); rc=$?
{ [ $rc -ne 0 ] && grep -q -- "--max-tokens is set by pnbench" <<<"$out"; } ||
  fail "--max-tokens: exit $rc: $out"

# --split-stats-wait: the statistics time of a 2-rank sync_batch row split into the wait at a
# barrier and the transfer after it (both columns filled, neither negative; the bench.py rows
# above, without the flag, leave them empty). With --probe-allreduce, updates 2 and 4 probe
# 8 B and 512 B all-reduces and update 3 alone is measured.
out=$("$pnbench" --probe-allreduce --norm sync_batch "${tiny[@]}" 2>&1); rc=$?
{ [ $rc -ne 0 ] && grep -q -- "add --split-stats-wait" <<<"$out"; } ||
  fail "--probe-allreduce without --split-stats-wait: exit $rc: $out"
"$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS=1 \
  "$pnbench" --split-stats-wait --probe-allreduce --predict-out "$tmp/p" --mode weak \
  --tokens 64 --warmup 1 --measure 3 --csv "$tmp/split.csv" --norm sync_batch "${tiny[@]}" \
  > "$tmp/split.log" 2>&1 || fail "--split-stats-wait: exit $?: $(tail -3 "$tmp/split.log")"
grep -q "transfer after it" "$tmp/split.log" || fail "--split-stats-wait printed no split: $(cat "$tmp/split.log")"
"$py" - "$tmp/split.csv" "$tmp/b/bench.csv" "$tmp/p/allreduce_in_training.csv" <<'PY' || fail "--split-stats-wait columns"
import csv, sys
row, = list(csv.DictReader(open(sys.argv[1])))
wait, transfer = float(row["stats_wait_ms"]), float(row["stats_transfer_ms"])
assert wait >= 0 and transfer > 0 and float(row["stats_allreduce_ms"]) > 0, row
assert row["measured_updates"] == "1", row  # update 3; 2 and 4 probed
assert all(r["stats_wait_ms"] == "" and r["stats_transfer_ms"] == ""
           for r in csv.DictReader(open(sys.argv[2]))), "rows without the flag have a split"
probes = list(csv.DictReader(open(sys.argv[3])))
assert [(p["bytes"], p["updates"]) for p in probes] == [("8", "1"), ("512", "1")], probes
assert all(float(p["seconds"]) > 0 and p["ranks"] == "2" and p["norm"] == "sync_batch" and
           p["stats_bytes_per_update"] == row["stats_bytes_per_update"] for p in probes), probes
print("split ok")
PY

# --predict: the all-reduce sweep of a 2-rank job (up to a 64 KiB bucket), the replayed
# statistics of one update, the fit and the scale-out table (numbers are never asserted, only
# that they are there and that PN's share is 0 and the whole-job groups cost at least the
# groups of 8); the check of the model against the split row above compares its transfer with
# its probes.
"$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS=1 \
  "$pnbench" --predict --predict-out "$tmp/p" --csv "$tmp/split.csv" --norm sync_batch \
  --bucket-mb 0.0625 "${tiny[@]}" \
  > "$tmp/predict.log" 2>&1 || fail "--predict: exit $?: $(tail -5 "$tmp/predict.log")"
"$py" - "$tmp/p" <<'PY' || fail "--predict output: $(tail -20 "$tmp/predict.log")"
import csv, os, sys
d = sys.argv[1]
sweep = list(csv.DictReader(open(os.path.join(d, "allreduce.csv"))))
assert [int(r["bytes"]) for r in sweep] == [8, 32, 128, 512, 2048, 8192, 32768, 65536], sweep
assert all(r["ranks"] == "2" and r["sync_group_size"] == "2" and float(r["seconds"]) > 0
           for r in sweep), sweep
replay = list(csv.DictReader(open(os.path.join(d, "replay.csv"))))
# 1 layer: self, ff and final norms, 2 all-reduces each; [1+2d] + [2d] doubles with d = 32.
assert len(replay) == 1 and replay[0]["messages"] == "6" and replay[0]["bytes"] == str(3 * 8 * 129), replay
fit = list(csv.DictReader(open(os.path.join(d, "fit.csv"))))
assert len(fit) == 1 and fit[0]["ranks"] == "2", fit
check = list(csv.DictReader(open(os.path.join(d, "check_replay.csv"))))
assert len(check) == 1 and float(check[0]["predicted_ms"]) > 0, check
split, = list(csv.DictReader(open(os.path.join(d, "..", "split.csv"))))
check, = list(csv.DictReader(open(os.path.join(d, "check.csv"))))
assert check["measured"] == "transfer" and check["model"] == "in training, probes", check
# Predicted = count x the line through the 8 B and 512 B probes at the mean message size.
t = {int(p["bytes"]): float(p["seconds"])
     for p in csv.DictReader(open(os.path.join(d, "allreduce_in_training.csv")))}
n, per = float(split["stats_allreduces_per_update"]), float(split["stats_bytes_per_update"])
want = 1e3 * n * (t[8] + (t[512] - t[8]) * (per / n - 8) / (512 - 8))
assert abs(float(check["predicted_ms"]) - want) <= 1e-9 * abs(want), (check, want)
assert abs(float(check["measured_ms"]) - float(split["stats_transfer_ms"])) < 1e-9, (check, split)
rows = list(csv.DictReader(open(os.path.join(d, "scaleout.csv"))))
assert sorted({int(r["gpus"]) for r in rows}) == [8, 64, 256, 1024], rows
assert all(float(r["stats_share"]) == 0 for r in rows if r["norm"].startswith("power")), rows
for model in {r["model"] for r in rows}:
    for norm in ("sync_batch", "sync_power_v"):
        share = {r["group"]: float(r["stats_share"]) for r in rows
                 if r["model"] == model and r["norm"] == norm and r["gpus"] == "1024"}
        assert share["whole job"] > share["8 (one node)"] > 0, (model, norm, share)
print("predict output ok")
PY
grep -q "PREDICTED (not measured)" "$tmp/predict.log" || fail "--predict printed no table"
if "$py" -c "import matplotlib" 2>/dev/null; then
  [ -s "$tmp/p/scaleout.png" ] || fail "matplotlib is installed but there is no scaleout.png"
fi

[ $failures -eq 0 ] && echo "bench smoke: all passed"
exit $((failures > 0))
