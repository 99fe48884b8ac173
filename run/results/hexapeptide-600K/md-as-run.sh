#!/bin/bash
# Session 34, issue 26: the hexapeptide's 100 ns of 600 K MD, step 1 of run/peptide_600K.sh (the same command).
cd /root/s34
{ date -u; /usr/bin/time -f "md wall %e s" bgp4 simulate --molecule alanine-hexapeptide --out /root/s34/ala6/600K-100ns.h5 \
    --frames 1000000 --save-every 50 --replicas 2 --seed 0 --quiet; date -u; } >> /root/s34/ala6-md.log 2>&1
