#!/usr/bin/env bash
# pntrain vs an equivalent PyTorch implementation (model.py, train_torch.py) on the CPU.
#
#   bench/vs_pytorch/run.sh [--updates N] [--warmup W] [--norms layer,batch,power]
#                           [--ranks 1,2] [--build DIR] [--config FILE] [--data DIR]
#                           [--threads T] [--out DIR]
#
# For each norm and rank count: pntrain under mpirun (builtin corpus, or --data DIR) and the
# PyTorch twin (random tokens of the same vocabulary, or the same --data DIR) with the config's
# sizes, batch and optimiser, dropout 0, threads per rank = cores / ranks (or --threads), W
# unmeasured then N measured updates. Prints median tokens/s of updates W+1..W+N of each, their
# ratio and the peak RSS of rank 0 of each. Run from anywhere; relative paths are taken from the
# current directory, defaults from the repository root. A translation config (arch = transformer)
# trains on its own data key unless --data is given; its per-site norms are the config's
# (--norms then sets only the sites the config leaves out, on both sides, as pntrain's --norm).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PY=/usr/bin/python3          # Debian's python: torch 1.13 and numpy

UPDATES=20
WARMUP=5
NORMS=layer,batch,power
RANKS=1,2
BUILD="$ROOT/build-vs"
CONFIG="$ROOT/configs/ptb_small.ini"
DATA=""
THREADS=""
OUT=""

usage() { sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
abspath() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }

while [ $# -gt 0 ]; do
  case "$1" in
    --updates) UPDATES="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --norms) NORMS="$2"; shift 2 ;;
    --ranks) RANKS="$2"; shift 2 ;;
    --build) BUILD="$(abspath "$2")"; shift 2 ;;
    --config) CONFIG="$(abspath "$2")"; shift 2 ;;
    --data) DATA="$(abspath "$2")"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --out) OUT="$(abspath "$2")"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

PNTRAIN="$BUILD/bin/pntrain"
if [ ! -x "$PNTRAIN" ]; then
  echo "run.sh: $PNTRAIN not found; build it first:" >&2
  echo "  cmake -S $ROOT -B $BUILD -DPN_CUDA=OFF && make -C $BUILD -j2 pntrain" >&2
  exit 1
fi
[ -f "$CONFIG" ] || { echo "run.sh: config '$CONFIG' not found" >&2; exit 1; }
[ -z "$DATA" ] || [ -d "$DATA" ] || { echo "run.sh: data directory '$DATA' not found" >&2; exit 1; }
"$PY" -c 'import torch, numpy' 2>/dev/null ||
  { echo "run.sh: $PY lacks torch or numpy" >&2; exit 1; }
[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/pn_vs_pytorch.XXXXXX)"
mkdir -p "$OUT"

# pntrain's corpus: --data, else the builtin one for a language model and the config's data key
# for a translation model.
PN_DATA=(--data "${DATA:-builtin}")
if [ -z "$DATA" ] && grep -Eq '^[[:space:]]*arch[[:space:]]*=[[:space:]]*transformer[[:space:]]*$' "$CONFIG"; then
  PN_DATA=()
fi

MPIRUN="${MPIRUN:-mpirun}"
MPI_ARGS=(--bind-to none)
[ "$(id -u)" = 0 ] && MPI_ARGS+=(--allow-run-as-root)
CORES="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"  # nproc alone honours OMP_NUM_THREADS
TOTAL=$((WARMUP + UPDATES))

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $CORES cores"
echo "pntrain: $PNTRAIN; PyTorch $("$PY" -c 'import torch; print(torch.__version__)') ($PY)"
echo "config: $CONFIG; data: ${DATA:-builtin corpus (pntrain) / random tokens (PyTorch)}"
echo "updates: $WARMUP warm-up + $UPDATES measured (median tokens/s of updates $((WARMUP + 1))..$TOTAL); dropout 0"
echo "threads per rank: $(for r in ${RANKS//,/ }; do t=${THREADS:-$((CORES / r))}; [ "$t" -ge 1 ] || t=1; printf '%s rank(s) -> %s  ' "$r" "$t"; done)"
echo "output: $OUT"
echo

# median tokens_per_s of updates W+1..W+N and the peak RSS (rank 0) from a metrics JSONL
pn_summary() {
  "$PY" - "$1" "$WARMUP" "$TOTAL" <<'EOF'
import json, statistics, sys
path, first, last = sys.argv[1], int(sys.argv[2]) + 1, int(sys.argv[3])
rows = [json.loads(l) for l in open(path) if l.strip()]
rows = [r for r in rows if "tokens_per_s" in r and first <= r["update"] <= last]
if not rows:
    print("nan nan"); sys.exit()
print(statistics.median(r["tokens_per_s"] for r in rows), max(r.get("peak_rss_mb", float("nan")) for r in rows))
EOF
}

ROWS="$OUT/rows.tsv"
: > "$ROWS"
for norm in ${NORMS//,/ }; do
  for r in ${RANKS//,/ }; do
    t=${THREADS:-$((CORES / r))}
    [ "$t" -ge 1 ] || t=1
    extra=()
    [ "$r" -gt "$CORES" ] && extra=(--oversubscribe)
    tag="${norm}_r${r}"
    metrics="$OUT/pntrain_$tag.jsonl"
    echo "== $norm, $r rank(s), $t thread(s) per rank: pntrain" >&2
    if ! "$MPIRUN" "${MPI_ARGS[@]}" "${extra[@]}" -np "$r" "$PNTRAIN" --config "$CONFIG" \
         --norm "$norm" --max-update "$TOTAL" --validate-interval-updates 0 --dropout 0 \
         --metrics "$metrics" --threads "$t" "${PN_DATA[@]}" \
         > "$OUT/pntrain_$tag.log" 2>&1; then
      echo "   pntrain failed: see $OUT/pntrain_$tag.log" >&2
    fi
    read -r pn_tps pn_rss < <(pn_summary "$metrics" 2>/dev/null || echo "nan nan")
    # The PyTorch side gets pntrain's vocabulary size (from its log; 67 for the builtin corpus).
    # "vocabulary V," (LM) or "vocabulary Vs / Vt (joint)," (translation: the target's)
    vocab="$(sed -n -e 's/.*: vocabulary [0-9]* \/ \([0-9]*\).*/\1/p' \
                    -e 's/.*: vocabulary \([0-9]*\),.*/\1/p' "$OUT/pntrain_$tag.log" | head -1)"
    [ -n "$vocab" ] || vocab=$([ -n "$DATA" ] && echo 10001 || echo 67)
    pn_params="$(sed -n 's/.*total \([0-9]*\) parameters.*/\1/p' "$OUT/pntrain_$tag.log" | head -1)"
    echo "== $norm, $r rank(s), $t thread(s) per rank: PyTorch (vocabulary $vocab)" >&2
    dargs=()
    [ -n "$DATA" ] && dargs=(--data "$DATA")
    if OMP_NUM_THREADS="$t" "$PY" "$HERE/train_torch.py" --config "$CONFIG" --norm "$norm" \
         --ranks "$r" --threads "$t" --updates "$UPDATES" --warmup "$WARMUP" --dropout 0 \
         --vocab "$vocab" "${dargs[@]}" > "$OUT/torch_$tag.log" 2>&1; then
      tail -1 "$OUT/torch_$tag.log" > "$OUT/torch_$tag.json"
    else
      echo "   PyTorch failed: see $OUT/torch_$tag.log" >&2
      echo '{}' > "$OUT/torch_$tag.json"
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$norm" "$r" "$t" "$pn_tps" "$pn_rss" \
      "$OUT/torch_$tag.json" "${pn_params:-?}" "$vocab" >> "$ROWS"
  done
done

echo
"$PY" - "$ROWS" <<'EOF'
import json, math, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
head = ("norm", "ranks", "thr/rank", "pntrain tok/s", "PyTorch tok/s", "ratio pn/pt",
        "pntrain RSS MB", "PyTorch RSS MB")
out, notes = [], []
def f(x, d=0):
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}"
for norm, r, t, pn_tps, pn_rss, tj, pn_params, vocab in rows:
    try:
        pt = json.load(open(tj))
    except Exception:
        pt = {}
    pn_tps, pn_rss = float(pn_tps), float(pn_rss)
    pt_tps = pt.get("tokens_per_s")
    pt_rss = pt.get("peak_rss_mb", [None])[0]
    ratio = pn_tps / pt_tps if pt_tps and not math.isnan(pn_tps) else None
    out.append((norm, r, t, f(pn_tps), f(pt_tps), f(ratio, 2), f(pn_rss), f(pt_rss)))
    if pt.get("params") is not None and pn_params != "?" and int(pn_params) != pt["params"]:
        notes.append(f"{norm}/{r}: parameter counts differ: pntrain {pn_params}, PyTorch {pt['params']}")
w = [max(len(str(x[i])) for x in out + [head]) for i in range(len(head))]
print("  ".join(h.ljust(w[i]) for i, h in enumerate(head)))
for row in out:
    print("  ".join(str(c).rjust(w[i]) if i > 1 else str(c).ljust(w[i]) for i, c in enumerate(row)))
print("\ntok/s: target tokens of all ranks per second of update wall time (median); "
      "RSS: peak resident set of rank 0. Figures on a shared machine are indicative.")
for n in notes:
    print("WARNING:", n)
EOF
