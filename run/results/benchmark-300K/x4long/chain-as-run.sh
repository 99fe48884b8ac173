#!/usr/bin/env bash
# Session 38, as run from /root/bgp4-long (the machine had been replaced: every data file lost).
# bash chain.sh 4 6 0 on one core and bash chain.sh 5 7 1 on the other, from 22:50 UTC; /root/s38/x4long.sh is
# x4long-as-run.sh with its 'cd /work/main' replaced by 'cd /root/bgp4-m38' (a snapshot of a265d85), and (session 39,
# before it started) its sampling line run with PYTHONPATH=/root/bgp4-m39, a snapshot of b4acd97 that
# includes the rigid block's orbit volume in log q (c6e1922): training is the same either way, the weights are today's.
set -e
cd /root/bgp4-long
export OMP_NUM_THREADS=1 PYTHONPATH=/root/bgp4-m38
for s in $1 $2; do
  [ -f data/ala2-300K-remd-dense-s$s.h5 ] || { date -u; bash /work/main/run/results/benchmark-300K/x4long/dense-as-run.sh $s; date -u; }
done
bash /root/s38/x4long.sh $3
