#!/bin/bash
# A/B: pntrain tokens/s with every GEMM on OpenBLAS against oneDNN for the untransposed ones.
P=/work/main/build/bin/pntrain; D=/work/shared/data/ptb; cd /tmp; rm -rf ab; mkdir ab; cd ab
run() { # name config ranks threads env
  local name=$1 cfg=$2 np=$3 th=$4 gemm=$5
  env PN_GEMM=$gemm mpirun --allow-run-as-root -np $np --bind-to none -x PN_GEMM -x OMP_NUM_THREADS=$th $P --config /work/main/configs/$cfg --data $D --cpu --threads $th --dropout 0 --max-update $6 --validate-interval-updates 0 --save-interval-updates 0 --metrics $name.jsonl > $name.log 2>&1
  python3 -c "
import json,statistics,sys
r=[json.loads(l) for l in open('$name.jsonl') if '\"tokens_per_s\"' in l]
v=[x['tokens_per_s'] for x in r][$7:]
print('$name', round(statistics.median(v)), len(v))"
}
for rep in 1 2; do
  for g in openblas onednn; do
    run small_1x2_${g}_$rep ptb_small.ini 1 2 $g 25 5
    run small_2x1_${g}_$rep ptb_small.ini 2 1 $g 25 5
    run wide_1x2_${g}_$rep ptb_wide.ini 1 2 $g 13 3
    run wide_2x1_${g}_$rep ptb_wide.ini 2 1 $g 13 3
  done
done
