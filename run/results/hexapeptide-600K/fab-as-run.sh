#!/bin/bash
# Session 36: run/peptide_600K.sh's step 4 for the hexapeptide (FAB from the 24,000-step ML run), resumable.
cd /root/s34/ala6
D=/root/s34/ala6/600K-100ns.h5
{ date -u; /usr/bin/time -f "fab train wall %e s" bgp4 train --data $D --init ml --model spline --steps 0 --batch 512 --augment \
    --objective fab --energy-steps 1500 --eval-every 250 --workers 2 --out fab --quiet; date -u;
  /usr/bin/time -f "sample wall %e s" bgp4 sample fab --n 100000 --workers 2 --quiet; date -u;
  bgp4 analyze ml fab --data $D --out report --workers 2; date -u; } >> fab.log 2>&1
