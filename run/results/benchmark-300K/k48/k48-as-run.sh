#!/bin/bash
# Issue 27 (session 22): the 0.977 target over 3 seeds. The ML spline runs on the remade x2 (10,000 steps, as
# x2e/ml, whose training files are copied in as seed 0), 20,000 samples each, refined by AIS(48) with
# independence moves alone (49 evaluations per sample). Then ala4dense.sh (tetrapeptide dense data, first since it serves a target), then x2e.sh (FAB levers).
# Resumable: rerun to continue. Snapshot m30.
cd /root/bgp4-long/m30; export PYTHONPATH=/root/bgp4-long/m30 OMP_NUM_THREADS=1
L=/root/bgp4-long
[ -f $L/k48/report/report.md ] || { date -u; /usr/bin/time -f "k48 wall %e s" python -m bgp4.cli sweep \
  --data $L/ala2-300K-remd-dense-x2.h5 --models spline --seeds 3 --steps 10000 --eval-every 500 --samples 20000 \
  --batch 512 --augment --objective ml --energy-steps 0 --refine 48 --refine-steps 0 --workers 1 --out $L/k48 --quiet && echo k48-done
  date -u; } >> $L/k48.log 2>&1
grep -q k48-done $L/k48.log && bash $L/ala4dense.sh && bash $L/x2e.sh
