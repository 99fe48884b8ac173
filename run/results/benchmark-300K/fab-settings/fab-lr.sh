#!/bin/bash
# Issue 28: does a higher FAB learning rate move the plateau? 300 K dipeptide, the v2 sweep's ML spline seed 0,
# 300 FAB steps at lr 1e-3 and 3e-4 (the sweep's FAB runs used 1e-4: flow ESS 0.285/0.357/0.344 at steps 100/200/300).
L=${WORK:?the folder of the data files}; SNAPSHOT=${SNAPSHOT:?a checkout of 3ab8cfc}; D=$L/ala2-300K-remd-v2.h5; O=$L/bench300/fab-lr; log=$L/fab-lr.log
cd $SNAPSHOT; export PYTHONPATH=$SNAPSHOT OMP_NUM_THREADS=1 OPENMM_CPU_THREADS=1
for lr in 1e-3 3e-4; do
  { date -u; /usr/bin/time -f "fab lr $lr wall %e s" python -m bgp4.cli train --data $D --init $L/bench300/ala2-v2/runs/spline-s0 --model spline \
    --steps 0 --batch 512 --augment --objective fab --energy-steps 300 --energy-lr $lr --eval-every 50 --workers 1 --out $O/lr$lr --quiet
    python -m bgp4.cli sample $O/lr$lr --n 20000 --workers 1 --quiet
    python -m bgp4.cli analyze $O/lr$lr --data $D --out $O/lr$lr/report --workers 1 > /dev/null; date -u; } >> $log 2>&1
done
