#!/bin/bash
# Session 34, issue 28: FAB after the weight-decay ML run (wd3) on the 600 K tetrapeptide, same FAB settings
# as the study's 800-step run, run on for 1,600 steps in one go (ML 57 min + FAB <= 63 min = the 2 h budget).
cd /root/s33
D=/root/s33/ala4-600K-100ns.h5
{ date -u; /usr/bin/time -f "fab train wall %e s" bgp4 train --data $D --init wd3 --model spline --steps 0 --batch 512 --augment \
    --objective fab --energy-steps 1600 --eval-every 200 --workers 2 --device cpu --seed 0 --out wd3-fab --quiet; date -u;
  /usr/bin/time -f "sample wall %e s" bgp4 sample wd3-fab --n 100000 --workers 2 --quiet; date -u;
  bgp4 analyze wd3 wd3-fab --data $D --out report-wd3-fab --workers 2; date -u; } >> fab.log 2>&1
