#!/usr/bin/env bash
# Issue 27: bgp4's rows on the field's 300 K table (no constraints: 60 dims for alanine dipeptide,
# 120 for the tetrapeptide): maximum-likelihood spline and spline-p4inv generators, 3 seeds each,
# raw and refined by AIS (20 levels, independence moves alone), then the table beside the
# published rows (run/scripts/benchmark_table.py).
#
# Needs the replica-exchange data of run/long_runs.sh (DATA). Resumable: run it again after a kill.
# Cost: 6 runs of 24,000 likelihood steps, about 1 h each on one core (two at a time on 2 cores).
#   bash run/benchmark_300K.sh [OUT] [DATA]
set -euo pipefail
out="${1:-out/benchmark-300K}"
data="${2:-data}"

for molecule in ala2 ala4; do
  bgp4 sweep --data "$data/$molecule-300K-remd.h5" --models spline,spline-p4inv --seeds 3 \
    --steps 24000 --batch 512 --augment --objective ml --energy-steps 0 \
    --refine 20 --refine-steps 0 --out "$out/$molecule" --quiet
done
python run/scripts/benchmark_table.py --dipeptide "$out/ala2" --tetrapeptide "$out/ala4" --out "$out/table.md"
