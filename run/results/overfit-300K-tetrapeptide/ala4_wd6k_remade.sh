#!/usr/bin/env bash
# Session 44: the 6,000-step control on the remade tetrapeptide data (the 12,000-step run's data),
# so that 6,000 against 12,000 steps compares steps on the same frames and code (the m40 snapshot). One core. Resumable.
set -e
L=/root/bgp4-long; D=$L/data/ala4-300K-remd-dense-s4.h5; R=$L/ala4-wd3-6000-remade
cd /root/bgp4-m40
export OMP_NUM_THREADS=1 PYTHONPATH=/root/bgp4-m40
{ date -u
  bgp4 --threads 1 train --data $D --model spline --weight-decay 3.0 --steps 6000 --keep-best --eval-every 250 \
    --batch 512 --augment --energy-steps 0 --workers 1 --device cpu --seed 0 --out $R --quiet
  date -u
  [ -f $R/samples-refined.h5 ] || bgp4 --threads 1 sample $R --n 20000 --refine 48 --refine-steps 0 --workers 1 --quiet
  date -u
  python run/results/benchmark-300K/dense-again/ess_files.py $R/samples.h5 $R/samples-refined.h5 | cut -c1-160
  bgp4 --threads 1 analyze $R --data $D --out $R-report
  date -u; echo ala4-wd6k-remade-done; } >> $L/ala4-wd3-6000-remade.log 2>&1
