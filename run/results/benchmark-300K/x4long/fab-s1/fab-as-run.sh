#!/usr/bin/env bash
# Session 41: FAB after the 32,000-step ML seed 1 (as seed 0 in session 40) at 300 K (60 dims, 1,000,000 dense frames), with
# the 600 K study's levers together (batch 2048, 8 gradient steps per AIS batch, cosine rate),
# 2,000 steps; then 20,000 samples and AIS(48) as the ML rows. One core, one thread. Resumable.
set -e
L=/root/bgp4-long; X=$L/data/ala2-300K-remd-dense-x4.h5; R=$L/x4long/runs/fab-levers-s1
cd /root/bgp4-m40
export OMP_NUM_THREADS=1 PYTHONPATH=/root/bgp4-m40
{ date -u
  bgp4 --threads 1 train --data $X --init $L/x4long/runs/spline-s1 --model spline --steps 0 --batch 2048 --augment \
    --objective fab --energy-steps 2000 --fab-reuse 8 --energy-lr-schedule cosine --eval-every 100 --seed 1 \
    --workers 1 --device cpu --out $R --quiet
  date -u
  [ -f $R/samples-refined.h5 ] || bgp4 --threads 1 sample $R --n 20000 --refine 48 --refine-steps 0 --workers 1 --quiet
  date -u
  python run/results/benchmark-300K/dense-again/ess_files.py $R/samples.h5 $R/samples-refined.h5 | cut -c1-200
  date -u; echo fab300-s1-done; } >> $L/fab300-s1.log 2>&1
