#!/bin/bash
cd /root/s33
{ date -u; /usr/bin/time -f "wall %e s" bgp4 simulate --molecule alanine-tetrapeptide --out /root/s33/ala4-600K-100ns.h5 \
  --frames 1000000 --save-every 50 --replicas 2 --seed 0 --quiet; date -u; } >> /root/s33/md.log 2>&1

#!/bin/bash
# Session 33, issue 26: weight decay 3 + keep-best on the 600 K tetrapeptide's 100 ns (the study's data, remade).
cd /root/s33
D=/root/s33/ala4-600K-100ns.h5
STEPS=${STEPS:-18000}
while [ ! -f $D ]; do sleep 20; done
{ date -u; /usr/bin/time -f "train wall %e s" bgp4 train --data $D --model spline --weight-decay 3.0 --steps $STEPS --keep-best \
    --eval-every 1000 --batch 512 --augment --objective ml --energy-steps 0 --workers 1 --device cpu --seed 0 --out wd3 --quiet; date -u;
  /usr/bin/time -f "sample+AIS wall %e s" bgp4 sample wd3 --n 100000 --refine 20 --refine-steps 0 --workers 2 --quiet; date -u;
  bgp4 analyze wd3 --data $D --out report-wd3 --workers 2; date -u; } >> chain.log 2>&1
