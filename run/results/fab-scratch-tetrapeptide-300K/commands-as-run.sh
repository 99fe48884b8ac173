#!/usr/bin/env bash
# What ran for this study (2026-12-03), in /root/bgp4-long of this project's 2-core CPU machine.
export OMP_NUM_THREADS=1
# An MD reference from the first SEGMENTS sealed segments of the dense replica exchange of run/long_runs.sh
# (the run itself goes on): a copy of them, finished into a data file of FRAMES 300 K frames, then its block errors.
snapshot() {  # NAME SEGMENTS FRAMES
  local out="snap/$1.h5"
  mkdir -p "$out.partial"
  cp data/ala4-300K-remd-dense-s4.h5.partial/settings.json "$out.partial/"
  for i in $(seq 0 $(($2 - 1))); do cp -r "data/ala4-300K-remd-dense-s4.h5.partial/$(printf segment-%04d "$i")" "$out.partial/"; done
  (cd snap && bgp4 simulate --molecule alanine-tetrapeptide --out "$1.h5" --temperature 300 \
    --constraints none --replica-exchange 300:600:6 --frames "$3" --save-every 100 --equilibration-ps 100 --seed 4 \
    --velocity-refresh exchange --quiet)
  python run/scripts/remd_check.py "$out" "$out" --blocks 10
}
# FAB from scratch: no MD data (09:33-10:34, HEAD 8bbe506)
bgp4 train --data none --molecule alanine-tetrapeptide --temperature 300 --constraints none --model spline --steps 0 \
  --objective fab --energy-steps 1000 --eval-every 250 --batch 512 --workers 1 --seed 0 --out runs/ala4-300K-fab-scratch-s0
# the MD reference: the first 53,000 frames (5.3 ns at 300 K) of the dense replica exchange of run/long_runs.sh,
# written from a copy of its 53 sealed segments (the run itself went on; 09:43, HEAD 8bbe506)
snapshot ala4-300K-remd-dense-s4-first 53 53000
# samples, raw and refined by AIS(20) with independence moves, then the report (10:34-10:37, HEAD f41a32b)
bgp4 sample runs/ala4-300K-fab-scratch-s0 --n 10000 --refine 20 --refine-steps 0 --workers 1 --quiet
bgp4 analyze runs/ala4-300K-fab-scratch-s0 --data snap/ala4-300K-remd-dense-s4-first.h5 --out report-fab4 --workers 1
# session 28: the run continued 1,200 steps (--init: an empty buffer, the same settings), 11:32-12:47, HEAD e3e8c0c
bgp4 train --data none --init runs/ala4-300K-fab-scratch-s0 --model spline --steps 0 --objective fab --energy-steps 1200 \
  --eval-every 300 --batch 512 --workers 1 --seed 0 --out runs/ala4-300K-fab-scratch-s0-more
bgp4 sample runs/ala4-300K-fab-scratch-s0-more --n 10000 --refine 20 --refine-steps 0 --workers 1 --quiet
# a longer MD reference: the replica exchange's first 95 sealed segments (94,390 frames; 12:30)
snapshot ala4-300K-remd-dense-s4-first95 95 94390  # segments cut by session ends are shorter than 1,000 iterations
# both runs against it (12:54, HEAD 72ac61a)
bgp4 analyze runs/ala4-300K-fab-scratch-s0 runs/ala4-300K-fab-scratch-s0-more --data snap/ala4-300K-remd-dense-s4-first95.h5 \
  --out report-fab4-both --workers 1
