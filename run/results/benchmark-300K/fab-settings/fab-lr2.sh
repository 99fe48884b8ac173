#!/bin/bash
# Issue 28, after fab-lr.sh (higher lr was worse): is FAB's plateau the replay buffer's age or the gradient noise?
# 300 FAB steps at lr 1e-4 from the same ML run: buffer 10,000 (batch 512), then batch 2048 (buffer 50,000).
L=${WORK:?the folder of the data files}; SNAPSHOT=${SNAPSHOT:?a checkout of 3ab8cfc}; D=$L/ala2-300K-remd-v2.h5; O=$L/bench300/fab-lr; log=$L/fab-lr.log
cd $SNAPSHOT; export PYTHONPATH=$SNAPSHOT OMP_NUM_THREADS=1 OPENMM_CPU_THREADS=1
run() { name=$1; shift
  { date -u; /usr/bin/time -f "fab $name wall %e s" python -m bgp4.cli train --data $D --init $L/bench300/ala2-v2/runs/spline-s0 --model spline \
    --steps 0 --augment --objective fab --energy-steps 300 --eval-every 50 --workers 1 --out $O/$name --quiet "$@"
    python -m bgp4.cli sample $O/$name --n 20000 --workers 1 --quiet
    python -m bgp4.cli analyze $O/$name --data $D --out $O/$name/report --workers 1 > /dev/null; date -u; } >> $log 2>&1
}
run buf10k --batch 512 --fab-buffer 10000
run batch2048 --batch 2048
