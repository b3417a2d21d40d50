#!/usr/bin/env bash
# A resume takes its run's flags: a run trained with non-default flags (on the command line and
# in --config), resumed with --save-dir, --metrics and --max-update only, has every option of the
# original run (the checkpoints' "options", every flag with its value, defaults included, but the
# paths of outputs, which a checkpoint does not keep) but the longer --max-update. A flag given with another value is applied with one warning naming both;
# --eval-only takes the run's flags but not its outputs (no line is added to its metrics).
# Usage: resume_flags.sh PNTRAIN MPIRUN...
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cat > run.ini <<'INI'
label-smoothing = 0.1
dropout = 0.3
warmup-updates = 2
norm = sync_power
log-timing = true
INI
common=(--decoder-layers 1 --decoder-embed-dim 32 --decoder-attention-heads 2
        --decoder-ffn-embed-dim 64 --max-tokens 256 --threads 1)
out=$("${mpirun[@]}" -np 2 "$pntrain" --config run.ini "${common[@]}" --dropout 0.2 --lr 0.003 \
      --clip-norm 0.5 --weight-decay 0.01 --adam-betas '(0.9, 0.98)' --pn-alpha-fwd 0.95 \
      --update-freq 2 --seed 7 --validate-interval-updates 3 --log-interval 2 --patience 9 \
      --metrics m.jsonl --save-dir CK --max-update 4 2>&1) || fail "first run: $out"
out=$("${mpirun[@]}" -np 2 "$pntrain" --save-dir CK --max-update 6 --metrics m.jsonl 2>&1) ||
  fail "resume: $out"
grep -q "restored CK/checkpoint_4" <<<"$out" || fail "did not resume: $out"
grep -q "dropout 0.2" <<<"$out" || fail "the resume's startup line: $(grep model: <<<"$out")"
! grep -q "flags other than its run's" <<<"$out" || fail "a warning for flags not given: $out"
"$py" - CK/checkpoint_4/model.bin CK/checkpoint_6/model.bin <<'PY' || fail "options differ"
import json, struct, sys
def options(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", blob, 8)
    return json.loads(blob[16:16 + n])["options"]
a, b = options(sys.argv[1]), options(sys.argv[2])
assert len(a) > 80, "only %d options stored" % len(a)
assert "save-dir" not in a and "metrics" not in a, "output paths stored"
assert "?" not in a.values(), [k for k, v in a.items() if v == "?"]  # every type is written
# Not taken on a resume: where the ranks compute (--threads, the machine's), and the length.
diff = {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
expected = {"max-update": ("4", "6")}
print("options compared: %d; differing: %s" % (len(a), diff))
assert diff == {**expected, **{k: v for k, v in diff.items() if k == "threads"}}, diff
for k, v in (("dropout", "0.2"), ("lr", "0.003"), ("label-smoothing", "0.1"),
             ("norm-self", "sync_power"), ("log-timing", "true"), ("update-freq", "2"),
             ("seed", "7"), ("pn-alpha-fwd", "0.95"), ("patience", "9")):
    assert b[k] == v, (k, b[k], v)
PY
# The resume trained on with the run's update size (update-freq 2).
[ "$(grep -c '"update":6,"wall_s"' m.jsonl)" -eq 1 ] || fail "update 6 not in the run's metrics"
out=$("${mpirun[@]}" -np 2 "$pntrain" --save-dir CK --max-update 8 --lr 0.001 2>&1) ||
  fail "resume with --lr: $out"
[ "$(grep -c "flags other than its run's" <<<"$out")" -eq 1 ] &&
  grep -q -- "--lr 0.001 (the checkpoint's run: 0.003)" <<<"$out" ||
  fail "no one warning naming both --lr values: $out"
# inverse_sqrt after 2 warmup updates: 0.001 x sqrt(2 / 8) at update 8 (0.003 would give 1.5e-3)
grep -q "update 8/8 .* lr 5.000e-04" <<<"$out" || fail "--lr 0.001 not applied: $out"
lines=$(wc -l < m.jsonl)
out=$("$pntrain" --restore-file CK/checkpoint_8 --eval-only 2>&1) || fail "eval-only: $out"
# (its model line names the model, not the training-only dropout)
grep -q "^model: 1 layers, d 32, 2 heads, ffn 64, norms self=sync_power" <<<"$out" ||
  fail "eval-only did not take the run's flags: $out"
[ "$(wc -l < m.jsonl)" -eq "$lines" ] || fail "eval-only wrote into the run's metrics file"
# A start without a GPU says so in words, not in the CUDA runtime's.
if grep -q "training on the CPU" <<<"$out"; then
  grep -q "pntrain: training on the CPU: no GPU" <<<"$out" &&
    ! grep -q "driver version is insufficient" <<<"$out" || fail "no-GPU message: $(grep -i cpu <<<"$out")"
fi
[ $failures -eq 0 ] && echo "resume flags: all passed"
exit $((failures > 0))
