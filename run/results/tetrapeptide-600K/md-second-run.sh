#!/bin/bash
# What ran, 2026-12-02 (WORK = this machine's work directory; SNAPSHOT = a copy of commit d80aa44): a second, independent
# run of 600 K tetrapeptide MD (seed 1, one replica) for the ALA3 dF check, on one core beside FAB from scratch on the other.
cd SNAPSHOT; export PYTHONPATH=SNAPSHOT OMP_NUM_THREADS=1
L=WORK
python -m bgp4.cli simulate --molecule alanine-tetrapeptide --out $L/ala4-600K-100ns-s1.h5 \
  --frames 1000000 --save-every 50 --replicas 1 --seed 1 --quiet
# Stopped by SIGTERM after 106 min at 718,000 frames (71.8 ns), then finished at that length (plain MD resizes):
python -m bgp4.cli simulate --molecule alanine-tetrapeptide --out $L/ala4-600K-100ns-s1.h5 \
  --frames 718000 --save-every 50 --replicas 1 --seed 1 --quiet
mv $L/ala4-600K-100ns-s1.h5 $L/ala4-600K-72ns-s1.h5
# P(phi > 0) and dF per residue with block standard errors (commit 30ee625's script): md-second-run.txt
cd REPO
for r in ALA2 ALA3 ALA4; do for b in 10 5; do
  echo "$r block $b"; python run/scripts/md_reference.py $L/ala4-600K-72ns-s1.h5 --residue $r --block-ns $b | grep "^md pooled"
done; done
