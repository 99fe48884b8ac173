#!/bin/bash
# Issues 27 and 28, after dense.sh remakes ala2-300K-remd-dense-x2.h5 (500,000 frames): the ML spline run
# of the 3-seed sweep's seed 0 (10,000 steps), then FAB with every lever from it (as levers2.sh: batch 2048,
# 8 gradient steps per AIS batch, cosine 1e-4 -> 1e-6, 2,000 steps). Each sampled 20,000 times, refined by
# AIS(20) and AIS(48) with independence moves alone (the <= 50 evaluations of the 0.977 target),
# and 250,000 times raw (the TV target at MD-sized sample counts).
# Resumable: rerun to continue. Snapshot m30.
cd /root/bgp4-long/m30; export PYTHONPATH=/root/bgp4-long/m30 OMP_NUM_THREADS=1
L=/root/bgp4-long; X=$L/ala2-300K-remd-dense-x2.h5; O=$L/x2e
set -e
samples() {  # run: 20,000 samples refined by AIS(20) (samples.h5) and AIS(48) (samples-k48.h5)
  [ -f $1/samples-refined.h5 ] || python -m bgp4.cli sample $1 --n 20000 --refine 20 --refine-steps 0 --workers 1 --quiet
  [ -f $1/samples-k48-refined.h5 ] || python -m bgp4.cli sample $1 --n 20000 --out $1/samples-k48.h5 --refine 48 \
    --refine-steps 0 --workers 1 --quiet
  # 250,000 raw samples: the Ramachandran TV at the sample counts of the MD runs (250,000 frames each)
  [ -f $1/samples-250k.h5 ] || python -m bgp4.cli sample $1 --n 250000 --out $1/samples-250k.h5 --workers 1 --quiet
}
{ date -u; /usr/bin/time -f "x2e-ml wall %e s" python -m bgp4.cli train --data $X --model spline --steps 10000 \
    --eval-every 500 --batch 512 --augment --objective ml --energy-steps 0 --seed 0 --workers 1 --out $O/ml --quiet
  samples $O/ml; date -u; echo x2e-ml-done
  /usr/bin/time -f "x2e-fab wall %e s" python -m bgp4.cli train --data $X --init $O/ml --model spline --steps 0 \
    --batch 2048 --augment --objective fab --energy-steps 2000 --fab-reuse 8 --energy-lr-schedule cosine \
    --eval-every 100 --workers 1 --out $O/fab-levers --quiet
  samples $O/fab-levers; date -u
  python -m bgp4.cli analyze $O/ml $O/fab-levers --data $X --out $O/report
  date -u; echo x2e-done; } >> $L/x2e.log 2>&1
