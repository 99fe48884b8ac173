#!/usr/bin/env bash
# As run (2026-11-29 03:45 - 06:16, over two sessions, resumed once): the batch-2048 FAB runs (ala2-fab2048,
# 600 FAB steps each) continued by 600 more FAB steps at the same settings (a fresh replay buffer), then
# sampled and refined as before. Code: a snapshot of f8e0412. 2 workers of one thread, beside other runs.
d=data/ala2-300K-remd.h5
bgp4 sweep --init ala2-fab2048 --data $d --models spline --seeds 3 --steps 0 --objective fab \
  --energy-steps 600 --eval-every 100 --samples 20000 --batch 2048 --augment --refine 20 --refine-steps 0 \
  --workers 2 --threads-per-run 1 --out ala2-fab2048-x2 --quiet
python run/scripts/benchmark_table.py --dipeptide ala2 --dipeptide ala2-fab2048 --dipeptide ala2-fab2048-x2 \
  --tetrapeptide ala4 --out table-v3.md   # the script of 85be7fc (FAB rows name their steps)
python run/scripts/paired_sweeps.py ala2-fab2048 ala2-fab2048-x2 > fab2048-x2/paired.md
# 2026-11-29 (session 16): paired.md made again from the two reports, with the clipped reverse ESS added
# (same figures otherwise), from this folder's parent:
python ../../scripts/paired_sweeps.py fab2048/report/metrics.json fab2048-x2/report/metrics.json --metrics reverse_ess,reverse_ess_clipped,log10_reverse_ess,ramachandran_tv,ramachandran_tv_reweighted,dF_phi_reweighted_kT,test_nll > fab2048-x2/paired.md
