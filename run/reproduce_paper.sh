#!/usr/bin/env bash
# Full reproduction of the paper's Boltzmann-generator experiment:
# 500,000 frames of 600 K MD; RNVP and P4Inv generators (25 blocks) trained for 40,000
# likelihood steps and 2,000 likelihood + energy steps; the spline and spline-p4inv generators
# (6,000 likelihood steps with relabelled methyl hydrogens, then 1,500 energy steps);
# 100,000 samples each; the report.
# Resumable: run it again after an interruption and it finishes what is left.
#   bash run/reproduce_paper.sh [OUT_DIR] [extra pipeline options, e.g. --device cuda]
set -euo pipefail
out="${1:-out/paper}"
shift || true
exec bgp4 pipeline --preset paper --out "$out" "$@"
