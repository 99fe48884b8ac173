#!/usr/bin/env bash
# session 29 probe: tetrapeptide ML at 300 K on the first 9.4 ns of the dense REMD (94,390 frames), 2,000 steps,
# before (ml-2000: fitted by the code of 3bed3bc) and after (ml-2000-reach) narrow torsions are widened to keep
# rare basins inside the splines' domain. Resumable: run again after a kill.
set -e
export OMP_NUM_THREADS=1
cd /root/bgp4-long
D=snap/ala4-300K-remd-dense-s4-first95.h5
while pgrep -f "train --data $D" > /dev/null; do sleep 20; done
for R in runs/ala4-dense95-ml-2000 runs/ala4-dense95-ml-2000-reach; do
  bgp4 train --data $D --model spline --steps 2000 --eval-every 250 --batch 512 --augment \
    --energy-steps 0 --workers 1 --device cpu --seed 0 --out $R --quiet
  echo "train $R done $(date)"
  bgp4 sample $R --n 20000 --refine 48 --refine-steps 0 --workers 1 --quiet
  echo "sample $R done $(date)"
done
bgp4 analyze runs/ala4-dense95-ml-2000 runs/ala4-dense95-ml-2000-reach --data $D --out report-dense95 --workers 1
echo "analyze done $(date)"
