#!/bin/bash
cd /root/bgp4-m8
export PYTHONPATH=/root/bgp4-m8
python -m bgp4.cli simulate --molecule alanine-tetrapeptide --out /root/bgp4-long/ala4-600K-100ns.h5 \
  --frames 1000000 --save-every 50 --replicas 2 --seed 0 --quiet >> /root/bgp4-long/ala4.log 2>&1
date -u >> /root/bgp4-long/ala4.log
#!/bin/bash
# Issue 26: the tetrapeptide's best-generator recipe at a 2 h training budget.
cd /root/bgp4-m8; export PYTHONPATH=/root/bgp4-m8
L=/root/bgp4-long; D=$L/ala4-600K-100ns.h5; R=$L/ala4-ml
STEPS=${STEPS:-30000}
{ date -u; python -m bgp4.cli train --data $D --model spline --out $R --steps $STEPS --energy-steps 0 --batch 512 \
    --augment --workers 1 --quiet; date -u; } >> $L/ala4-ml.log 2>&1
#!/bin/bash
cd /root/bgp4-m8; export PYTHONPATH=/root/bgp4-m8
L=/root/bgp4-long; D=$L/ala4-600K-100ns.h5; R=$L/ala4-ml; F=$L/ala4-fab
log=$L/ala4-chain.log
while [ ! -f $R/complete.json ]; do sleep 15; done
{ date -u; /usr/bin/time -f "sample+AIS wall %e s" python -m bgp4.cli sample $R --n 100000 --refine 20 --refine-steps 0 --workers 2 --quiet; date -u; } >> $log 2>&1
{ python -m bgp4.cli analyze $R --data $D --out $L/ala4-report-ml --workers 2; date -u; } >> $log 2>&1
{ python -m bgp4.cli train --data $D --init $R --model spline --steps 0 --batch 512 --augment --objective fab \
    --energy-steps ${FAB_STEPS:-800} --eval-every 200 --workers 2 --out $F --quiet; date -u; } >> $log 2>&1
{ python -m bgp4.cli sample $F --n 100000 --workers 2 --quiet; date -u; } >> $log 2>&1
{ python -m bgp4.cli analyze $R $F --data $D --out $L/ala4-report --workers 2; date -u; } >> $log 2>&1
#!/bin/bash
cd /root/bgp4-m8; export PYTHONPATH=/root/bgp4-m8
L=/root/bgp4-long
{ date -u; /usr/bin/time -f "wall %e s" python -m bgp4.cli sample $L/ala4-ml-k48 --n 20000 --refine 48 --refine-steps 0 --workers 2 --quiet; date -u;
  python -m bgp4.cli analyze $L/ala4-ml-k48 --data $L/ala4-600K-100ns.h5 --out $L/ala4-report-k48 --workers 2; date -u; } >> $L/k48.log 2>&1
