#!/usr/bin/env bash
# Session 45: the published tetrapeptide target (X-H bonds held, 98 flow dims) at 300 K, 3 seeds of
# spline and spline-p4inv: finish the dense replica exchange (the same command as s43/ala4hb.sh, which
# it replaces), then run/benchmark_300K.sh's tetrapeptide rows on it (weight decay 3, keep-best, 6,000
# steps, AIS(48), 20,000 samples), two sweep workers. The amber96 runs stay paused meanwhile.
# Resumable: rerun to continue.
set -e
L=/root/bgp4-long; D=$L/data/ala4-hbonds-300K-remd-dense-s4.h5
cd /root/bgp4-m45
export OMP_NUM_THREADS=1 PYTHONPATH=/root/bgp4-m45
tree() { echo $1; for c in $(pgrep -P $1); do tree $c; done; }
a96() { for p in $(pgrep -f "bgp4 simulate --out $L/a96/"); do for q in $(tree $p); do kill -$1 $q 2>/dev/null; done; done; }
while pgrep -f "simulate --molecule alanine-tetrapeptide --out $D" >/dev/null; do sleep 30; done
date -u
bgp4 simulate --molecule alanine-tetrapeptide --out $D --temperature 300 \
  --replica-exchange 300:600:6 --frames 250000 --save-every 50 --equilibration-ps 100 --seed 4 \
  --velocity-refresh exchange --quiet
date -u; echo ala4hb-data-done
a96 STOP; trap "a96 CONT" EXIT
ONLY_DENSE=1 ALA4_DENSE_STEPS=6000 ALA4_DENSE_FILE=ala4-hbonds-300K-remd-dense-s4.h5 SAMPLES=20000 \
  bash run/benchmark_300K.sh $L/bench300-hbonds $L/data
date -u; echo ala4hb-sweep-done
