#!/usr/bin/env bash
# Reference runs that hold the trainer's behaviour byte for byte: a language model and a
# translation model, each at 2 ranks under mpirun with accumulation (--update-freq 2), a
# synchronized norm beside rank-local ones, validation and a save. Their metrics lines (minus
# the wall-clock fields) and the bytes of their last checkpoint (minus the data's path in
# model.bin's header, which depends on where the clone is) must equal those in tests/reference/,
# recorded from the trainer as it was before its files were split (and again when checkpoints
# began to keep their run's flags: the rest of every file unchanged). The numbers hold on the CPU they were recorded on (OpenBLAS
# picks kernels by CPU): elsewhere the test is skipped, saying so.
# Usage: reference_runs.sh REPO_ROOT PNTRAIN MPIRUN... ; REFERENCE_RECORD=1 rewrites the files.
set -u
root="$1" pntrain="$2"; shift 2
mpirun=("$@")
ref="$root/tests/reference"
py=$(command -v python3) || { echo "skipped: no python3"; exit 77; }
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
if [ "${REFERENCE_RECORD:-0}" != 1 ] && [ "$cpu" != "$(cat "$ref/cpu.txt")" ]; then
  echo "skipped: the reference was recorded on '$(cat "$ref/cpu.txt")', this is '$cpu'"; exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
common=(--max-update 6 --update-freq 2 --max-tokens 128 --dropout 0.1 --seed 3 --lr 3e-3
        --warmup-updates 2 --validate-interval-updates 3 --save-interval-updates 3
        --log-interval 1 --threads 1)
lm=(--decoder-layers 1 --decoder-embed-dim 32 --decoder-attention-heads 2
    --decoder-ffn-embed-dim 64 --tokens-per-sample 32 --norm-self power --norm-ff sync_batch
    --norm-final layer)
mt=(--arch transformer --data "$ref/mt" --source-lang de --target-lang en
    --share-all-embeddings --encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 16
    --decoder-embed-dim 16 --encoder-attention-heads 2 --decoder-attention-heads 2
    --encoder-ffn-embed-dim 32 --decoder-ffn-embed-dim 32 --encoder-norm-self power
    --encoder-norm-ff sync_power --attention-dropout 0.1)

# The record of one run: its metrics lines without wall-clock fields, then the sha256 of each
# file of its last checkpoint with the header's data path left out.
digest() {
  "$py" - "$1" "$2" <<'PY'
import hashlib, json, os, struct, sys
metrics, ck = sys.argv[1], sys.argv[2]
for line in open(metrics):
    j = json.loads(line)
    for k in ("wall_s", "tokens_per_s", "time", "peak_rss_mb"):
        j.pop(k, None)
    print(json.dumps(j, sort_keys=True))
for name in sorted(os.listdir(ck)):
    blob = open(os.path.join(ck, name), "rb").read()
    if name.endswith(".bin"):
        (hlen,) = struct.unpack_from("<Q", blob, 8)
        header = json.loads(blob[16:16 + hlen])
        for part in ("config", "flags", "options"):  # the data's path: where the clone is
            header.get(part, {}).pop("data", None)
        blob = blob[:8] + json.dumps(header, sort_keys=True).encode() + blob[16 + hlen:-4]
    print("%s %s" % (hashlib.sha256(blob).hexdigest(), name))
PY
}

failures=0
for arch in lm mt; do
  if [ $arch = lm ]; then flags=("${lm[@]}"); else flags=("${mt[@]}"); fi
  out=$(timeout 300 "${mpirun[@]}" -np 2 "$pntrain" "${common[@]}" "${flags[@]}" \
          --save-dir "$tmp/$arch" --metrics "$tmp/$arch.jsonl" 2>&1) ||
    { echo "FAIL: the $arch reference run: exit $?"; echo "$out" | tail -5; failures=$((failures+1)); continue; }
  digest "$tmp/$arch.jsonl" "$tmp/$arch/checkpoint_6" >"$tmp/$arch.txt"
  if [ "${REFERENCE_RECORD:-0}" = 1 ]; then
    cp "$tmp/$arch.txt" "$ref/$arch.txt"; echo "$cpu" >"$ref/cpu.txt"; echo "recorded $ref/$arch.txt"
  elif ! diff "$ref/$arch.txt" "$tmp/$arch.txt"; then
    echo "FAIL: the $arch reference run differs from tests/reference/$arch.txt"; failures=$((failures+1))
  else
    echo "ok: $arch: $(grep -c '"update"' "$tmp/$arch.txt") metrics lines and $(grep -c ' .*\.bin$\| DONE$' "$tmp/$arch.txt") checkpoint files equal the reference byte for byte"
  fi
done

# Where --max-epoch ends a translation run (its epoch counts update batches, not samples): one
# epoch, then resumed to two, the updates of each "done" line.
mt_epochs() {
  local e out
  for e in 1 2; do
    out=$(timeout 300 "${mpirun[@]}" -np 2 "$pntrain" "${common[@]}" "${mt[@]}" --max-update 1000 \
            --max-epoch $e --validate-interval-updates 0 --save-dir "$tmp/epochs" 2>&1) ||
      { echo "run failed: exit $?"; echo "$out" | tail -3; return; }
    echo "--max-epoch $e: $(grep -o 'done | [0-9]*/[0-9]* updates' <<<"$out") $(grep -o 'reached --max-epoch [0-9]*' <<<"$out")"
  done
}
mt_epochs >"$tmp/mt_epochs.txt"
if [ "${REFERENCE_RECORD:-0}" = 1 ]; then
  cp "$tmp/mt_epochs.txt" "$ref/mt_epochs.txt"; echo "recorded $ref/mt_epochs.txt"
elif ! diff "$ref/mt_epochs.txt" "$tmp/mt_epochs.txt"; then
  echo "FAIL: --max-epoch ends the translation run elsewhere than tests/reference/mt_epochs.txt"
  failures=$((failures+1))
else
  echo "ok: --max-epoch ends translation runs where it did: $(tr '\n' ';' <"$tmp/mt_epochs.txt")"
fi
exit $failures
