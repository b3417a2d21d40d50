#!/usr/bin/env bash
# pntrain --sample through the command line: N lines "sample <i> | <prompt> ...", the same text
# for the same --seed at 1 and 2 ranks, other text for another seed.
# Usage: sample.sh PNTRAIN MPIRUN...
set -euo pipefail
pntrain="$1"; shift
mpirun=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
f=(--decoder-layers 1 --decoder-embed-dim 32 --decoder-attention-heads 2 --decoder-ffn-embed-dim 64
   --tokens-per-sample 32 --max-tokens 256 --norm power --warmup-updates 2 --threads 1
   --validate-interval-updates 0 --log-interval 1000)
"$pntrain" "${f[@]}" --max-update 10 --save-dir "$work/ck" 2>"$work/log"
s=(--restore-file "$work/ck/checkpoint_10" --sample 4 --prompt "w5 w17" --top-k 20 --max-len 12)
one=$("$pntrain" "${f[@]}" "${s[@]}" --seed 3 2>>"$work/log")
two=$("${mpirun[@]}" -np 2 "$pntrain" "${f[@]}" "${s[@]}" --seed 3 2>>"$work/log")
other=$("$pntrain" "${f[@]}" "${s[@]}" --seed 4 2>>"$work/log")
echo "$one"
fail=0
[ "$(grep -c '^sample [1-4] | w5 w17' <<<"$one")" = 4 ] || { echo "FAIL: want 4 samples continuing the prompt"; fail=1; }
[ "$one" = "$two" ] || { echo "FAIL: 2 ranks sampled other text:"; echo "$two"; fail=1; }
[ "$one" != "$other" ] || { echo "FAIL: --seed 4 gave the same text as --seed 3"; fail=1; }
# A PN checkpoint saved by 2 ranks (a running state per rank): the same text at 1 and 2 ranks,
# both sampling with the mean of the saved ranks' states.
"${mpirun[@]}" -np 2 "$pntrain" "${f[@]}" --max-update 10 --save-dir "$work/ck2" 2>>"$work/log"
s2=(--restore-file "$work/ck2/checkpoint_10" --sample 8 --prompt "w5 w17" --max-len 60)
one2=$("$pntrain" "${f[@]}" "${s2[@]}" --seed 3 2>>"$work/log")
two2=$("${mpirun[@]}" -np 2 "$pntrain" "${f[@]}" "${s2[@]}" --seed 3 2>>"$work/log")
[ "$one2" = "$two2" ] || { echo "FAIL: a 2-rank checkpoint sampled at 1 and 2 ranks differs:"; echo "$one2"; echo "$two2"; fail=1; }
[ $fail = 0 ] && echo "ok: same text at 1 and 2 ranks for --seed 3 (a 1-rank and a 2-rank checkpoint), other text for --seed 4"
exit $fail
