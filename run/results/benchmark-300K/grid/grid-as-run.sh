#!/usr/bin/env bash
# Session 49, at f285faa: the Ramachandran KL and TV of session 48's clip-rule generator (clip-rule/clip-as-run.sh)
# on bgp4's grid and on the table's. RUN: that run directory; X2: its training data (160,000 frames).
#   bash grid-as-run.sh RUN X2
set -euo pipefail
run="${1:-/root/s48/run}" x2="${2:-/root/s48/data/x2.h5}"
bgp4 analyze "$run" --data "$x2" --out grid64 --workers 1 --rama-bins 64
bgp4 analyze "$run" --data "$x2" --out grid100 --workers 1 --rama-bins 100
cp grid64/metrics.json metrics-64.json && cp grid100/metrics.json metrics-100.json
