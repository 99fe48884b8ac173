#!/bin/bash
# Issue 27: does more 300 K data (REMD v2 + 100 ns plain MD, 150,000 frames) let ML train longer without overfitting?
cd SNAPSHOT; export PYTHONPATH=/root/bgp4-m15 OMP_NUM_THREADS=1
W=WORK/merge300; D=$W/ala2-300K-remd-v2+md100.h5; REF=WORK/ala2-300K-remd-v2.h5
for N in 250 1000 2000; do
  date -u
  /usr/bin/time -f "train s$N wall %e s" python -m bgp4.cli train --data $D --model spline --out $W/s$N --steps $N --eval-every 125 --batch 512 --augment \
    --objective ml --energy-steps 0 --workers 1 --quiet
  python -m bgp4.cli sample $W/s$N --n 20000 --workers 1 --quiet
  python -m bgp4.cli analyze $W/s$N --data $REF --out $W/report-s$N --workers 1 > /dev/null
  python -c "import json,sys; m=json.load(open('$W/report-s$N/metrics.json'))['models']; [print('s$N', k, {x: v.get(x) for x in ('reverse_ess','reverse_ess_clipped','forward_ess','p_phi_positive','test_nll','mean_energy_kT','ramachandran_tv')}) for k,v in m.items()]"
done
date -u
