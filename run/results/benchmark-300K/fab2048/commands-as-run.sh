#!/usr/bin/env bash
# As run (2026-11-28 20:45 - 2026-11-29 03:25, over three sessions; paused and resumed four times):
# the v3 ML sweep's spline runs (bench300/ala2) continued with 600 FAB steps at batch 2048.
# Code: a snapshot of dbd26ce to about step 100 a seed, then of f8e0412 (the sweep's trim-threshold fix;
# bgp4/generator unchanged between them). --workers 1 until 2026-11-29 01:52, then 2.
d=data/ala2-300K-remd.h5
bgp4 sweep --init ala2 --data $d --models spline --seeds 3 --steps 0 --objective fab \
  --energy-steps 600 --eval-every 100 --samples 20000 --batch 2048 --augment --refine 20 --refine-steps 0 \
  --workers 2 --threads-per-run 1 --out ala2-fab2048 --quiet
python run/scripts/benchmark_table.py --dipeptide ala2 --dipeptide ala2-fab2048 --tetrapeptide ala4 --out table-v3.md
python run/scripts/paired_sweeps.py ala2 ala2-fab2048 > fab2048/paired.md
# 2026-11-29 (session 16): paired.md made again from the two reports, with the clipped reverse ESS added
# (same figures otherwise), from this folder's parent:
python ../../scripts/paired_sweeps.py v3/report/metrics.json fab2048/report/metrics.json --metrics reverse_ess,reverse_ess_clipped,log10_reverse_ess,ramachandran_tv,ramachandran_tv_reweighted,dF_phi_reweighted_kT,test_nll > fab2048/paired.md
