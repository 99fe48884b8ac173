#!/usr/bin/env bash
# The two follow-up calls of the 2026-12-04 lease, run on the same warm machine right after
# `BGP4_WHEELS=.whl bash run/bench/gpu_check.sh "$OUT"` (wheels installed as in that script).
# 1. The dipeptide training of gpu_check.sh on the machine's 16 CPU cores (gpu_check.sh's 45 s
#    limit stopped it there; the limit is now 60 s).
w=/tmp/w2; mkdir -p $w
python3 -m bgp4.cli simulate --out $w/a2.h5 --frames 20000 --replicas 16 --quiet
python3 -m bgp4.cli train --data $w/a2.h5 --model spline --objective ml --steps 300 --eval-every 150 \
    --compile off --quiet --device cpu --out $w/cpu                  # -> 2026-12-04-ala2-cpu16-complete.json
# 2. The hexapeptide recipe on the 16 CPU cores (300 steps) and on CUDA with torch.compile (600 steps).
w=/tmp/w3; mkdir -p $w
python3 -m bgp4.cli simulate --molecule alanine-hexapeptide --out $w/a6.h5 --frames 16000 --replicas 16 \
    --equilibration-ps 5 --quiet
C="--data $w/a6.h5 --model spline --objective ml --batch 512 --augment --quiet"
python3 -m bgp4.cli train $C --steps 300 --eval-every 300 --compile off --device cpu --out $w/cpu
#                                                                      -> 2026-12-04-ala6-cpu16-complete.json
python3 -m bgp4.cli train $C --steps 600 --eval-every 300 --compile on --device cuda --out $w/cudac
#                                                                      -> 2026-12-04-ala6-cuda-compiled-complete.json
