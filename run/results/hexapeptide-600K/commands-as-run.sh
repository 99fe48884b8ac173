#!/bin/bash
# Session 35, issue 26: the hexapeptide at full budget, the steps of run/peptide_600K.sh (MD done in session 34).
set -euo pipefail
out=/root/s34/ala6
data=$out/600K-100ns.h5
t() { echo "== $(date -u) $*"; /usr/bin/time -f "wall %e s" "$@"; }
t bgp4 train --data "$data" --model spline --out "$out/ml" --steps 24000 --energy-steps 0 --batch 512 \
  --augment --workers 1 --quiet
t bgp4 sample "$out/ml" --n 100000 --refine 20 --refine-steps 0 --workers 2 --quiet
t bgp4 analyze "$out/ml" --data "$data" --out "$out/report-ml"
echo "== $(date -u) done ml"
