#!/usr/bin/env bash
# Session 41 (for a later session): once the tetrapeptide's dense 300 K data (seed 4, remade) exists,
# the overfit study's weight-decay recipe at 12,000 steps (6,000 gave 0.273 / 0.733 clipped, the test
# NLL still falling), then 20,000 samples with AIS(48) and the report. One core, one thread. Resumable.
set -e
L=/root/bgp4-long; D=$L/data/ala4-300K-remd-dense-s4.h5; R=$L/ala4-wd3-12000
cd /root/bgp4-m40
export OMP_NUM_THREADS=1 PYTHONPATH=/root/bgp4-m40
until [ -f $D ]; do sleep 60; done
{ date -u
  bgp4 --threads 1 train --data $D --model spline --weight-decay 3.0 --steps 12000 --keep-best --eval-every 250 \
    --batch 512 --augment --energy-steps 0 --workers 1 --device cpu --seed 0 --out $R --quiet
  date -u
  [ -f $R/samples-refined.h5 ] || bgp4 --threads 1 sample $R --n 20000 --refine 48 --refine-steps 0 --workers 1 --quiet
  date -u
  python run/results/benchmark-300K/dense-again/ess_files.py $R/samples.h5 $R/samples-refined.h5 | cut -c1-160
  bgp4 --threads 1 analyze $R --data $D --out $R-report
  date -u; echo ala4-wd12k-done; } >> $L/ala4-wd3-12000.log 2>&1
