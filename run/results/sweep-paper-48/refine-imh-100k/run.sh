#!/bin/bash
# 100,000 refined samples at K = 24 (one independence + one MALA move per level: <= 50 evaluations per sample)
cd /work/main
for r in p4inv-s0 rnvp-s0; do
  echo "== $r $(date)"
  /usr/bin/env time -f "wall %e s, cpu %U+%S s" python -m bgp4.cli sample out/refine-imh/runs/$r --n 100000 --refine 24 --overwrite --quiet
  python -m bgp4.cli analyze out/refine-imh/runs/$r --data out/data/ala2-600K-100ns.h5 --out out/refine-imh/report-$r
done
echo "== done $(date)"
