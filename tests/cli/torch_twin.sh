#!/usr/bin/env bash
# The PyTorch twin (python/pntrain_torch.py) against `pntrain --eval-only`: for layer, batch,
# power and dyt models, LM and translation, the exported checkpoint's validation loss in PyTorch equals
# pntrain's to 1e-4; also a PN LM trained at 2 ranks (rank-local state, both evaluation
# states). Exits 77 (skipped) without python3-torch and numpy.
# Usage: torch_twin.sh PNTRAIN PNEXPORT MPIRUN...
set -euo pipefail
pntrain="$(realpath "$1")" pnexport="$(realpath "$2")"
shift 2
mpirun=("$@")
here="$(cd "$(dirname "$0")" && pwd)"
twin="$here/../../python/pntrain_torch.py"
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
"$py" -c "import torch, numpy" 2>/dev/null || { echo "skipped: no python3-torch/numpy"; exit 77; }
work=$(mktemp -d)
trap 'rc=$?; [ $rc -ne 0 ] && tail -20 "$work/log"; rm -rf "$work"; exit $rc' EXIT
cd "$work"

# Small synthetic corpora: an LM text with local structure, and a toy translation task.
"$py" - <<'PY'
import os, random
random.seed(7)
os.makedirs("lm"); os.makedirs("mt")
def lm_line():
    a = random.randrange(120); out = [a]
    for _ in range(random.randint(2, 14)):
        a = (a * 7 + random.randint(0, 4)) % 120; out.append(a)
    return " ".join("w%d" % x for x in out)
for split, n in (("train", 1200), ("valid", 120), ("test", 60)):
    open("lm/%s.txt" % split, "w").write("\n".join(lm_line() for _ in range(n)) + "\n")
    src, tgt = [], []
    for _ in range(n // 2):
        w = [random.randrange(41) for _ in range(random.randint(2, 12))]
        src.append(" ".join("a%d" % x for x in w))
        tgt.append(" ".join("b%d" % (x * 3 % 41) for x in reversed(w)))
    open("mt/%s.de" % split, "w").write("\n".join(src) + "\n")
    open("mt/%s.en" % split, "w").write("\n".join(tgt) + "\n")
PY

lm="--data lm --decoder-layers 2 --decoder-embed-dim 32 --decoder-attention-heads 4
    --decoder-ffn-embed-dim 64 --tokens-per-sample 32 --max-tokens 512 --warmup-updates 5
    --validate-interval-updates 0 --lr 3e-3 --log-interval 1000 --threads 1"
mt="--arch transformer --data mt --encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 32
    --decoder-embed-dim 32 --encoder-attention-heads 4 --decoder-attention-heads 4
    --encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 --max-tokens 512 --warmup-updates 5
    --validate-interval-updates 0 --lr 3e-3 --log-interval 1000 --threads 1"
eval_mt="--beam 1 --gen-max-sentences 1 --max-len-b 3"
failed=0

# compare NAME PNTRAIN_EVAL_LINE TWIN_LINE
compare() {
  local ours theirs
  ours=$(sed -n 's/.*valid loss \([0-9.]*\).*/\1/p' <<<"$2")
  theirs=$(sed -n 's/.*valid loss \([0-9.]*\).*/\1/p' <<<"$3")
  if [ -z "$ours" ] || [ -z "$theirs" ]; then
    echo "FAIL $1: no loss in '$2' / '$3'"; failed=1; return
  fi
  if awk -v a="$ours" -v b="$theirs" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 1e-4) }'; then
    echo "ok   $1: pntrain --eval-only $ours, PyTorch twin $theirs"
  else
    echo "FAIL $1: pntrain --eval-only $ours, PyTorch twin $theirs"; failed=1
  fi
}

for norm in layer batch power dyt; do
  # shellcheck disable=SC2086
  "$pntrain" $lm --norm $norm --dropout 0.1 --max-update 25 --save-dir "lm_$norm" 2>>"$work/log"
  ours=$("$pntrain" $lm --norm $norm --eval-only --restore-file "lm_$norm/checkpoint_25" 2>>"$work/log")
  "$pnexport" "lm_$norm/checkpoint_25" --out "lm_$norm.safetensors" $lm --norm $norm >/dev/null
  compare "LM $norm" "$ours" "$("$py" "$twin" "lm_$norm.safetensors" --data lm)"

  "$pntrain" $mt --norm $norm --dropout 0.1 --max-update 15 --save-dir "mt_$norm" 2>>"$work/log"
  ours=$("$pntrain" $mt --norm $norm $eval_mt --eval-only --restore-file "mt_$norm/checkpoint_15" 2>>"$work/log")
  "$pnexport" "mt_$norm/checkpoint_15" --out "mt_$norm.safetensors" $mt --norm $norm >/dev/null
  compare "translation $norm" "$ours" "$("$py" "$twin" "mt_$norm.safetensors" --data mt)"
done

# The same corpora as fairseq-preprocess data-bins (written from the format's public
# description): pntrain trains and evaluates on them, the twin reads them too.
"$py" - <<'PY'
import collections, os, struct
def write_indexed(prefix, items):
    sizes = [len(x) for x in items]
    pointers = [2 * sum(sizes[:i]) for i in range(len(sizes))]
    with open(prefix + ".bin", "wb") as f:
        for x in items:
            f.write(struct.pack("<%dH" % len(x), *x))
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(items), 2))
        f.write(struct.pack("<%di" % len(sizes), *sizes))
        f.write(struct.pack("<%dq" % len(pointers), *pointers))
        f.write(struct.pack("<2q", 0, len(items)))
def dictionary(path, lines):
    counts = collections.Counter(w for l in lines for w in l.split())
    words = sorted(counts, key=lambda w: (-counts[w], w))
    with open(path, "w") as f:
        f.writelines("%s %d\n" % (w, counts[w]) for w in words)
    return {w: 4 + i for i, w in enumerate(words)}
def encode(lines, ids, keep_empty):
    return [[ids.get(w, 3) for w in l.split()] + [2] for l in lines if keep_empty or l.split()]
read = lambda p: open(p).read().splitlines()
os.makedirs("lm_bin"); os.makedirs("mt_bin")
ids = dictionary("lm_bin/dict.txt", read("lm/train.txt"))
for split in ("train", "valid", "test"):
    write_indexed("lm_bin/" + split, encode(read("lm/%s.txt" % split), ids, False))
for lang in ("de", "en"):
    ids = dictionary("mt_bin/dict.%s.txt" % lang, read("mt/train." + lang))
    for split in ("train", "valid", "test"):
        write_indexed("mt_bin/%s.de-en.%s" % (split, lang),
                      encode(read("mt/%s.%s" % (split, lang)), ids, True))
PY
lmb="${lm/--data lm/--data lm_bin}"
mtb="${mt/--data mt/--data mt_bin}"
"$pntrain" $lmb --norm power --max-update 10 --save-dir lmb 2>>"$work/log"
ours=$("$pntrain" $lmb --norm power --eval-only --restore-file lmb/checkpoint_10 2>>"$work/log")
"$pnexport" lmb/checkpoint_10 --out lmb.safetensors $lmb --norm power >/dev/null
compare "LM power on a fairseq data-bin" "$ours" "$("$py" "$twin" lmb.safetensors --data lm_bin)"
"$pntrain" $mtb --norm power --max-update 10 --save-dir mtb 2>>"$work/log"
ours=$("$pntrain" $mtb --norm power $eval_mt --eval-only --restore-file mtb/checkpoint_10 2>>"$work/log")
"$pnexport" mtb/checkpoint_10 --out mtb.safetensors $mtb --norm power >/dev/null
compare "translation power on a fairseq data-bin" "$ours" \
        "$("$py" "$twin" mtb.safetensors --data mt_bin)"

# PN at 2 ranks: each rank's own running state; evaluation with rank 0's or the mean.
"${mpirun[@]}" -np 2 "$pntrain" $lm --norm power --max-update 10 --save-dir lm_pn2 2>>"$work/log"
for state in rank0 mean; do
  ours=$("${mpirun[@]}" -np 2 "$pntrain" $lm --norm power --pn-eval-state $state --eval-only \
         --restore-file lm_pn2/checkpoint_10 2>>"$work/log" | grep '^eval')
  "$pnexport" lm_pn2/checkpoint_10 --out "pn2_$state.safetensors" $lm --norm power \
              --pn-eval-state $state >/dev/null
  compare "LM power, 2 ranks, --pn-eval-state $state" "$ours" \
          "$("$py" "$twin" "pn2_$state.safetensors" --data lm)"
done
# rank 1's own state is in the export, and differs from rank 0's
"$py" -c "
import sys; sys.path.insert(0, '$(dirname "$twin")')
from pntrain_torch import read_safetensors
t, m = read_safetensors('pn2_rank0.safetensors')
k = 'decoder.layers.0.self_attn_layer_norm.running_psi2'
assert m['world_size'] == '2', m['world_size']
assert (t[k] == t['ranks.0.' + k]).all(), 'evaluation state rank0 is not rank 0s'
assert not (t['ranks.0.' + k] == t['ranks.1.' + k]).all(), 'rank-local states are equal'
print('ok   export holds both ranks\' PN state (they differ), evaluation state = rank 0\'s')
" || failed=1

# A configs/ptb_small.ini checkpoint exports with no flag at all (the model and its corpus come
# from the checkpoint); the twin reads it back to pntrain's validation loss. Skipped without
# ../shared/data/ptb beside the repository.
ptb="$here/../../../shared/data/ptb"
if [ -f "$ptb/train.txt" ]; then
  ptb=$(realpath "$ptb")
  "${mpirun[@]}" -np 2 "$pntrain" --config "$here/../../configs/ptb_small.ini" --data "$ptb" \
    --max-update 3 --validate-interval-updates 0 --threads 1 --save-dir ptb 2>>"$work/log"
  ours=$("$pntrain" --eval-only --restore-file ptb/checkpoint_3 --threads 1 2>>"$work/log")
  "$pnexport" ptb/checkpoint_3 --out ptb.safetensors >/dev/null
  compare "configs/ptb_small.ini exported with no flags" "$ours" \
          "$("$py" "$twin" ptb.safetensors --data "$ptb")"
else
  echo "skipped: no ../shared/data/ptb beside the repository for the ptb_small export"
fi
exit $failed
