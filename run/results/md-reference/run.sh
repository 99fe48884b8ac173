#!/bin/bash
# dF(phi > 0) of 100 + 400 ns of MD (blocks of 10 ns per replica) against reweighted generator samples
cd /work/main
bgp4 simulate --out out/data/ala2-600K-400ns.h5 --frames 400000 --save-every 500 --replicas 4 --seed 1
O=out
python run/scripts/md_reference.py $O/data/ala2-600K-100ns.h5 $O/data/ala2-600K-400ns.h5 --samples \
  $O/s100-aug-24k/samples.h5 $O/s100-aug-24k/samples-refined.h5 $O/refine-imhonly/runs/s100-aug-24k/samples-refined.h5 \
  $O/refine-imh/runs/p4inv-s0/samples.h5 $O/refine-imh/runs/p4inv-s0/samples-refined.h5 \
  $O/refine-imhonly/runs/p4inv-s0/samples-refined.h5 $O/refine-imh/runs/rnvp-s0/samples.h5 \
  $O/refine-imh/runs/rnvp-s0/samples-refined.h5
