#!/usr/bin/env bash
# Issues 26 and 28 on a longer peptide at 600 K (implicit solvent, X-H bonds fixed): the best
# alanine-dipeptide recipe at a 2 h training budget, then FAB from it.
#
# 1. 100 ns of MD (2 x 50 ns, 1,000,000 frames). Alanine tetrapeptide (98 flow dims): about
#    0.7 ns/min per replica, 75 min on both cores;
# 2. the spline generator with relabelled methyl hydrogens, STEPS likelihood steps, sized to 2 h of
#    training on 2 cores: 30,000 for the tetrapeptide (5.3-5.7 steps/s, about 90 min), 24,000 for
#    the hexapeptide (3.1-3.7 steps/s on quiet cores: 110 min, measured). The hexapeptide's MD runs at
#    about 0.39 ns/min per replica with both replicas on 2 cores: about 130 min for 100 ns;
# 3. 100,000 samples, raw and refined by AIS (K = 20 levels, independence moves alone: 21 energy
#    evaluations per sample);
# 4. FAB from that run (FAB_STEPS steps), 100,000 samples of it;
# 5. one report: per-residue Ramachandran TV against the MD floors, dF(phi_i > 0), ESS.
#
# Resumable: every command continues where a killed one stopped. Time it on quiet cores: other
# runnable processes slow a 2-thread training several-fold (run/long_runs.sh says why).
#   bash run/peptide_600K.sh [MOLECULE] [OUT]     # MOLECULE: alanine-tetrapeptide (default) or alanine-hexapeptide
set -euo pipefail
molecule="${1:-alanine-tetrapeptide}"
out="${2:-out/$molecule}"
default_steps=30000
if [ "$molecule" = alanine-hexapeptide ]; then default_steps=24000; fi
steps="${STEPS:-$default_steps}"
fab_steps="${FAB_STEPS:-1500}"
mkdir -p "$out"
data="$out/600K-100ns.h5"

bgp4 simulate --molecule "$molecule" --out "$data" --frames 1000000 --save-every 50 --replicas 2 --seed 0 --quiet
bgp4 train --data "$data" --model spline --out "$out/ml" --steps "$steps" --energy-steps 0 --batch 512 \
  --augment --workers 1 --quiet
bgp4 sample "$out/ml" --n 100000 --refine 20 --refine-steps 0 --workers 2 --quiet
bgp4 train --data "$data" --init "$out/ml" --model spline --steps 0 --batch 512 --augment \
  --objective fab --energy-steps "$fab_steps" --eval-every 250 --workers 2 --out "$out/fab" --quiet
bgp4 sample "$out/fab" --n 100000 --workers 2 --quiet
bgp4 analyze "$out/ml" "$out/fab" --data "$data" --out "$out/report"
