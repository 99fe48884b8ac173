#!/bin/bash
# Session 35, issue 28: FAB after wd3 on the 600 K tetrapeptide with fab-torch's stronger settings:
# cosine lr from 3e-4, HMC with 4 leapfrog steps, gradient clip 1e3 (against 1e-4 constant, MALA, clip 10).
cd /root/s33
D=/root/s33/ala4-600K-100ns.h5
{ date -u; /usr/bin/time -f "fab train wall %e s" bgp4 train --data $D --init wd3 --model spline --steps 0 --batch 512 --augment \
    --objective fab --energy-steps 800 --energy-lr 3e-4 --energy-lr-schedule cosine --fab-leapfrog 4 --clip-grad 1000 \
    --eval-every 200 --workers 2 --device cpu --seed 0 --out wd3-fab-lev --quiet; date -u;
  /usr/bin/time -f "sample wall %e s" bgp4 sample wd3-fab-lev --n 100000 --workers 2 --quiet; date -u;
  bgp4 analyze wd3 wd3-fab-lev --data $D --out report-wd3-fab-lev --workers 2; date -u; } >> fab-lev.log 2>&1
