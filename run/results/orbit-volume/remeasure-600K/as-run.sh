#!/usr/bin/env bash
# Session 40 (2026-12-05), as run from a snapshot of 144fc5a on this project's 2-core CPU, after the
# 32,000-step 300 K runs had finished (nothing else running until the analysis; the tetrapeptide
# runs of the same chain started after it). W is any working directory.
set -e
W=${1:-out/remeasure-600K}; D=$W/ala2-600K-100ns.h5
mkdir -p $W
bgp4 simulate --out $D --frames 1000000 --save-every 50 --replicas 4 --seed 0 --quiet                 # 931 s
bgp4 train --data $D --model spline --out $W/ml --steps 24000 --energy-steps 0 --batch 512 --augment \
  --workers 1 --quiet                                                                                  # 45.3 min
bgp4 sample $W/ml --n 100000 --workers 2 --quiet
bgp4 sample $W/ml --n 100000 --refine 20 --refine-steps 0 --workers 2 --quiet                         # 250 s
bgp4 analyze $W/ml --data $D --out $W/report
