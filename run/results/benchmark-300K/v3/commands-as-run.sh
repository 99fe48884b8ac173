#!/usr/bin/env bash
# Issue 27: the 300 K dipeptide ML sweep on the remade data (v3), then the FAB batch-2048 sweep from it.
# Snapshot m20 = dbd26ce (bgp4/ unchanged since). One worker, one thread: the tetrapeptide REMD holds the other core.
set -euo pipefail
export PYTHONPATH=/root/bgp4-m20 OMP_NUM_THREADS=1
b() { python -c "import sys; from bgp4.cli import main; sys.argv[0]='bgp4'; main()" "$@"; }
d=/root/bgp4-long/data/ala2-300K-remd.h5
cd /root/bgp4-long/bench300
date; b sweep --data $d --models spline,spline-p4inv --seeds 3 --steps 250 --eval-every 50 \
  --samples 20000 --batch 512 --augment --objective ml --energy-steps 0 --refine 20 --refine-steps 0 \
  --workers ${W:-1} --threads-per-run 1 --out ala2 --quiet; date
b sweep --init ala2 --data $d --models spline --seeds 3 --steps 0 --objective fab \
  --energy-steps 600 --eval-every 100 --samples 20000 --batch 2048 --augment --refine 20 --refine-steps 0 \
  --workers ${W:-1} --threads-per-run 1 --out ala2-fab2048 --quiet; date
