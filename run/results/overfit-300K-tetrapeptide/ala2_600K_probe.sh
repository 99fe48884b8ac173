#!/usr/bin/env bash
# session 30: does weight decay help the 600 K dipeptide on few frames? /root/s29/ala2-600K-5ns.h5: despite its name 2 ns,
# 100,000 frames 20 fs apart (bgp4 simulate --frames 100000 --save-every 10 --replicas 1 --seed 0)
set -e
export OMP_NUM_THREADS=1
cd /root/s30  # this machine's work folder of session 30
for wd in 0 3.0; do
  bgp4 train --data /root/s29/ala2-600K-5ns.h5 --model spline --weight-decay $wd --steps 1500 --keep-best --eval-every 250 \
    --batch 512 --augment --energy-steps 0 --workers 1 --device cpu --seed 0 --out ala2-wd$wd --quiet > ala2-wd$wd.log 2>&1
  bgp4 sample ala2-wd$wd --n 20000 --workers 1 --quiet >> ala2-wd$wd.log 2>&1
  echo "done $(date)" >> ala2-wd$wd.log
done
bgp4 analyze ala2-wd0 ala2-wd3.0 --data /root/s29/ala2-600K-5ns.h5 --out ala2-report --workers 1   # -> report-ala2-600K/
