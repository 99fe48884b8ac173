#!/usr/bin/env bash
# Session 45, issue 27: is the dipeptide's ML row (0.810 on 1,000,000 frames) short of capacity, not frames?
# On x4 the 6-block flows end with test NLL within 0.02-0.07 nats of train NLL (no overfitting), and no
# single flow coordinate carries the log-weight spread. Probe: 12 blocks (2x the couplings, about 2.3x the
# cost a step), 14,000 keep-best steps (about 100 min on a quiet core), seed 0; AIS(48) on 20,000 samples.
# One core once the metadynamics walks are done. Resumable: rerun to continue.
set -e
L=/root/bgp4-long; X=$L/data/ala2-300K-remd-dense-x4.h5; R=$L/x4deep/spline-b12-s0
cd /root/bgp4-m45
export OMP_NUM_THREADS=1 PYTHONPATH=/root/bgp4-m45
while pgrep -f metad_phi.py >/dev/null; do sleep 30; done
mkdir -p $L/x4deep
{ date -u; /usr/bin/time -f "x4deep b12 s0 train wall %e s" bgp4 --threads 1 train --data $X --model spline --blocks 12 \
    --steps 14000 --keep-best --eval-every 1000 --batch 512 --augment --objective ml --energy-steps 0 --seed 0 \
    --workers 1 --device cpu --out $R --quiet
  date -u
  [ -f $R/samples-refined.h5 ] || bgp4 --threads 1 sample $R --n 20000 --refine 48 --refine-steps 0 --workers 1 --quiet
  date -u
  python run/results/benchmark-300K/dense-again/ess_files.py $R/samples.h5 $R/samples-refined.h5 | cut -c1-200
  date -u; echo x4deep-b12-s0-done; } >> $L/x4deep-b12-s0.log 2>&1
