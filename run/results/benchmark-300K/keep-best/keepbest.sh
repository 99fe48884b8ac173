#!/bin/bash
# keep-best probe: alanine dipeptide 300 K (REMD v2, 60 dims), spline, 1,000 likelihood steps with early stopping on the test NLL (seed 0);
# against the sweep's 250-step run of the same seed (reverse ESS 0.266).
cd /root/bgp4-m17; export PYTHONPATH=/root/bgp4-m17 OMP_NUM_THREADS=1 OPENMM_CPU_THREADS=1
L=/root/bgp4-long; D=$L/ala2-300K-remd-v2.h5; R=$L/bench300/keepbest-s1000
{ date -u; python -m bgp4.cli train --data $D --model spline --out $R --steps 1000 --energy-steps 0 --batch 512 --augment --eval-every 25 --keep-best --workers 1 --seed 0 --quiet
  python -m bgp4.cli sample $R --n 20000 --workers 1 --quiet
  python -m bgp4.cli analyze $R --data $D --out $R/report --workers 1; date -u; } >> $L/keepbest300.log 2>&1
