#!/usr/bin/env bash
# Session 32: weight decay 3 + keep-best on the dipeptide's 500,000 dense 300 K frames (x2), 2 seeds in parallel.
set -euo pipefail
export OMP_NUM_THREADS=1
cd /root/bgp4-long
while [ ! -f data/ala2-300K-remd-dense-s4.h5 ] || [ ! -f data/ala2-300K-remd-dense-s5.h5 ]; do sleep 30; done
[ -f data/ala2-300K-remd-dense-x2.h5 ] || python /work/main/run/scripts/merge_data.py \
  data/ala2-300K-remd-dense-x2.h5 data/ala2-300K-remd-dense-s4.h5 data/ala2-300K-remd-dense-s5.h5
X2=data/ala2-300K-remd-dense-x2.h5
STEPS=${STEPS:-10000}
one() {  # seed
  bgp4 train --data $X2 --model spline --weight-decay 3.0 --steps $STEPS --keep-best --eval-every 500 --batch 512 \
    --augment --objective ml --energy-steps 0 --workers 1 --device cpu --seed $1 --out runs/ala2-x2-wd3-s$1 --quiet
  bgp4 sample runs/ala2-x2-wd3-s$1 --n 20000 --refine 48 --refine-steps 0 --workers 1 --quiet
}
one 0 > runs-s0.log 2>&1 &
one 1 > runs-s1.log 2>&1 &
wait
bgp4 analyze runs/ala2-x2-wd3-s0 runs/ala2-x2-wd3-s1 --data $X2 --out report-ala2-x2-wd3 --workers 2
echo done
