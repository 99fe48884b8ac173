#!/bin/bash
# Issue 27 (session 23): ML >= 0.82 over 3 seeds on x4 (1,000,000 dense frames). Waits for x4.sh (seed 0,
# trained by `bgp4 train --device cpu` into x4/runs/spline-s0, which this sweep adopts), then seeds 1 and 2
# with the same settings, 20,000 samples each refined by AIS(48) (49 evaluations), and the sweep's report.
# Resumable: rerun to continue. Snapshot m33 = 619cec4 (session 25: sample records the device drawn on, so the sweep adopts seed 0 samples).
cd /root/bgp4-long/m33; export PYTHONPATH=/root/bgp4-long/m33 OMP_NUM_THREADS=1
L=/root/bgp4-long
until grep -q x4-done $L/x4.log 2>/dev/null; do sleep 60; done
{ date -u; /usr/bin/time -f "x4b wall %e s" python -m bgp4.cli sweep \
  --data $L/ala2-300K-remd-dense-x4.h5 --models spline --seeds 3 --steps 20000 --eval-every 500 --samples 20000 \
  --batch 512 --augment --objective ml --energy-steps 0 --refine 48 --refine-steps 0 --workers 1 --worker-memory 8 --out $L/x4 --quiet && echo x4b-done
  date -u; } >> $L/x4b.log 2>&1
