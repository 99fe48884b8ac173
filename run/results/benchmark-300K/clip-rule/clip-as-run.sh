#!/usr/bin/env bash
# Session 48: a 300 K dipeptide generator made in one session, to measure what the clipping rule moves
# on AIS(48) samples. Waits for the two replica-exchange runs, merges, trains, samples, counts.
set -euo pipefail
d=/root/s48/data
while [ ! -f $d/ala2-300K-remd-dense-half-s4.h5 ] || [ ! -f $d/ala2-300K-remd-dense-half-s5.h5 ]; do sleep 20; done
date -u +"%T data done"
[ -f $d/x2.h5 ] || bgp4 merge $d/x2.h5 $d/ala2-300K-remd-dense-half-s4.h5 $d/ala2-300K-remd-dense-half-s5.h5
date -u +"%T merged"
bgp4 --threads 1 train --data $d/x2.h5 --model spline --steps 4000 --keep-best --eval-every 500 --batch 512 \
  --augment --objective ml --energy-steps 0 --seed 0 --out /root/s48/run --quiet
date -u +"%T trained"
bgp4 sample /root/s48/run --n 100000 --refine 48 --refine-steps 0 --workers 2 --quiet
date -u +"%T sampled"
python /work/main/run/scripts/ess_by_count.py /root/s48/run/samples.h5 /root/s48/run/samples-refined.h5 \
  --counts 20000 50000 | tee /root/s48/ess-by-count.txt
date -u +"%T counted"
