#!/bin/bash
# Issue 26/28: tetrapeptide FAB continued from the 800-step FAB run (fresh buffer and Adam), 1,600 more steps.
cd /root/bgp4-m9; export PYTHONPATH=/root/bgp4-m9 OMP_NUM_THREADS=1
L=/root/bgp4-long
{ date -u; /usr/bin/time -f "fab4-more wall %e s" python -m bgp4.cli train --data $L/ala4-600K-100ns.h5 --init $L/ala4-fab --model spline --steps 0 --batch 512 --augment --objective fab --workers 1 --quiet --energy-steps 1600 --eval-every 200 --out $L/ala4-fab2; date -u; } >> $L/fab4-more.log 2>&1
