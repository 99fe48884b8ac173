#!/bin/bash
# 100,000 samples refined with independence moves alone (no MALA), one run after the other on the
# quiet machine, in copies of the run directories (out/s100-aug-24k, out/refine-imh/runs/{p4inv,rnvp}-s0).
# Ran at commit 7a13e9e, where --refine-steps 0 was briefly the default; it is spelled out here.
cd /work/main
R=out/refine-imhonly/runs
for spec in s100-aug-24k:20 p4inv-s0:48 rnvp-s0:48; do
  n=${spec%%:*}; k=${spec##*:}
  echo "== $n K=$k start $(date +%T)"
  /usr/bin/time -f "wall %e s" python -m bgp4.cli sample $R/$n --n 100000 --refine $k --refine-steps 0 --quiet --overwrite
  echo "== $n end $(date +%T)"
done
for n in s100-aug-24k p4inv-s0 rnvp-s0; do
  python -m bgp4.cli analyze $R/$n --data out/data/ala2-600K-100ns.h5 --out $R/$n/report
done
