#!/bin/bash
# FAB pilot: alanine dipeptide 600 K, from the quick preset's ML spline run (3,000 steps, 5 ns data)
cd /root/bgp4-m2
export PYTHONPATH=/root/bgp4-m2
set -x
python -m bgp4.cli train --data /tmp/quick1/data/ala2-600K.h5 --init /tmp/quick1/runs/spline --model spline --augment \
  --steps 0 --energy-steps 400 --objective fab --eval-every 100 --out /root/bgp4-long/fab-pilot --workers 1 --quiet
python -m bgp4.cli sample /root/bgp4-long/fab-pilot --n 10000 --refine 0 --workers 1 --quiet
python -m bgp4.cli analyze /tmp/quick1/runs/spline /root/bgp4-long/fab-pilot --data /tmp/quick1/data/ala2-600K.h5 --out /root/bgp4-long/fab-pilot-report --workers 1
