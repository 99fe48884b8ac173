#!/usr/bin/env bash
# Session 41: after FAB at 300 K, 100,000 raw samples of the ML seed 0 and of FAB (seed 1 draws, so
# the intervals are tighter than the 20,000-sample rows), then bgp4 analyze of the two runs.
L=/root/bgp4-long; X=$L/data/ala2-300K-remd-dense-x4.h5; R=$L/x4long/runs
cd /root/bgp4-m40
export OMP_NUM_THREADS=1 PYTHONPATH=/root/bgp4-m40
until grep -q fab300-done $L/fab300-s0.log; do sleep 30; done
{ date -u
  for r in spline-s0 fab-levers-s0; do
    [ -f /root/s41/$r-100k.h5 ] || bgp4 --threads 1 sample $R/$r --n 100000 --seed 1 --out /root/s41/$r-100k.h5 --workers 1 --quiet
    date -u
  done
  python run/results/benchmark-300K/dense-again/ess_files.py /root/s41/spline-s0-100k.h5 /root/s41/fab-levers-s0-100k.h5 | cut -c1-160
  date -u
  bgp4 --threads 1 analyze $R/spline-s0 $R/fab-levers-s0 --data $X --out /root/s41/report
  date -u; echo after-fab-done; } >> /root/s41/after-fab.log 2>&1
