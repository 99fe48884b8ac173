#!/bin/bash
# What ran, 2026-12-02 (WORK = this machine's work directory; SNAPSHOT = a copy of commit d80aa44): issue 28, FAB from scratch, the 20,000-step command of run/energy_training.sh,
# on one core beside a 600 K tetrapeptide MD run on the other.
cd SNAPSHOT; export PYTHONPATH=SNAPSHOT OMP_NUM_THREADS=1
L=WORK
python -m bgp4.cli train --data none --molecule alanine-dipeptide --temperature 600 \
  --model spline --steps 0 --objective fab --energy-steps 20000 --eval-every 250 --batch 512 --workers 1 --seed 0 --quiet \
  --out $L/fab-scratch
# Stopped by SIGTERM at 02:29 UTC after 93 min (checkpoint at step 2,381). A copy of the run directory, its settings.json
# given energy_steps 2381 (the energy phase's lr is constant, so this is the run `--energy-steps 2381` gives), finished:
python -m bgp4.cli train --data none --molecule alanine-dipeptide --temperature 600 \
  --model spline --steps 0 --objective fab --energy-steps 2381 --eval-every 250 --batch 512 --workers 1 --seed 0 --quiet \
  --out $L/fab-scratch-2381
python -m bgp4.cli sample $L/fab-scratch-2381 --n 20000 --workers 1 --quiet
# 20 ns of 600 K MD for the Ramachandran and forward-ESS comparison (the 100 ns file of the first run was lost with its machine)
python -m bgp4.cli simulate --out $L/ala2-600K-20ns.h5 --frames 200000 --save-every 50 --replicas 1 --seed 0 --quiet
python -m bgp4.cli analyze $L/fab-scratch-2381 --data $L/ala2-600K-20ns.h5 --out $L/fab-scratch-2381-report --workers 1
