#!/bin/bash
# Issue 27 (session 22): ML >= 0.82 on 1,000,000 dense frames (x4, lane-a.sh's merge of seeds 4-7). First the
# spline sweep's seed 0 alone at 20,000 steps (about 80 min on a quiet core: inside the target's 2 h), with
# --device cpu so that a later `bgp4 sweep --out x4` adopts it as runs/spline-s0; then 20,000 samples refined
# by AIS(48) (49 evaluations) and 250,000 raw ones (TV). Waits for lane-a.sh. Resumable: rerun to continue.
cd /root/bgp4-long/m30; export PYTHONPATH=/root/bgp4-long/m30 OMP_NUM_THREADS=1
L=/root/bgp4-long; X=$L/ala2-300K-remd-dense-x4.h5; R=$L/x4/runs/spline-s0
until grep -q lane-a-done $L/lane-a.log 2>/dev/null; do sleep 60; done
set -e
{ date -u; /usr/bin/time -f "x4-ml wall %e s" python -m bgp4.cli train --data $X --model spline --steps 20000 \
    --eval-every 500 --batch 512 --augment --objective ml --energy-steps 0 --seed 0 --workers 1 --device cpu --out $R --quiet
  [ -f $R/samples-refined.h5 ] || python -m bgp4.cli sample $R --n 20000 --refine 48 --refine-steps 0 --workers 1 --quiet
  [ -f $R/samples-250k.h5 ] || python -m bgp4.cli sample $R --n 250000 --out $R/samples-250k.h5 --workers 1 --quiet
  date -u; echo x4-done; } >> $L/x4.log 2>&1
