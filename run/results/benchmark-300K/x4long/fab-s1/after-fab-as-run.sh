#!/usr/bin/env bash
# Session 42: after FAB seed 1 at 300 K, as /root/s41/after-fab.sh for seed 0: 100,000 raw samples of
# the ML seed 1 and of FAB (seed 1 draws), then bgp4 analyze of the two runs.
L=/root/bgp4-long; X=$L/data/ala2-300K-remd-dense-x4.h5; R=$L/x4long/runs
cd /root/bgp4-m40
export OMP_NUM_THREADS=1 PYTHONPATH=/root/bgp4-m40
until grep -q fab300-s1-done $L/fab300-s1.log; do sleep 30; done
{ date -u
  for r in spline-s1 fab-levers-s1; do
    [ -f /root/s42/$r-100k.h5 ] || bgp4 --threads 1 sample $R/$r --n 100000 --seed 1 --out /root/s42/$r-100k.h5 --workers 1 --quiet
    date -u
  done
  python run/results/benchmark-300K/dense-again/ess_files.py /root/s42/spline-s1-100k.h5 /root/s42/fab-levers-s1-100k.h5 | cut -c1-160
  date -u
  bgp4 --threads 1 analyze $R/spline-s1 $R/fab-levers-s1 --data $X --out /root/s42/report-s1
  date -u; echo after-fab-s1-done; } >> /root/s42/after-fab-s1.log 2>&1
