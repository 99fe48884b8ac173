#!/bin/bash
# What ran (snapshot and work paths of this machine): the first 1,049 steps of fab-scratch.sh, then fab-scratch-1100.sh
# Issue 28: FAB from scratch (no MD data), alanine dipeptide 600 K, 48 dims; resumable, extended over sessions.
cd SNAPSHOT; export PYTHONPATH=SNAPSHOT OMP_NUM_THREADS=1
L=WORK
{ date -u; /usr/bin/time -f "fab-scratch wall %e s" python -m bgp4.cli train --data none --molecule alanine-dipeptide --temperature 600 \
  --model spline --steps 0 --objective fab --energy-steps 20000 --eval-every 250 --batch 512 --workers 1 --seed 0 --quiet \
  --out $L/fab-scratch; date -u; } >> $L/fab-scratch.log 2>&1
# Issue 28: FAB from scratch cut at 1,100 steps: a copy of fab-scratch (20,000 planned) at its step-1,049 checkpoint with
# energy_steps set to 1,100 (the energy phase's lr is constant, so this is the run `--energy-steps 1100` would give); then samples and a report.
cd SNAPSHOT; export PYTHONPATH=SNAPSHOT OMP_NUM_THREADS=1
L=WORK
{ date -u; python -m bgp4.cli train --data none --molecule alanine-dipeptide --temperature 600 \
  --model spline --steps 0 --objective fab --energy-steps 1100 --eval-every 250 --batch 512 --workers 1 --seed 0 --quiet \
  --out $L/fab-scratch-1100
  python -m bgp4.cli sample $L/fab-scratch-1100 --n 20000 --workers 1 --quiet
  python -m bgp4.cli analyze $L/fab-scratch-1100 --data $L/ala2-600K-100ns.h5 --out $L/fab-scratch-1100-report --workers 1
  date -u; } >> $L/fab-scratch-1100.log 2>&1
