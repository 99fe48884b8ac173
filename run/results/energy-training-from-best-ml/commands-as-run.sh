#!/bin/bash
# Issue 28 headline: FAB from the best ML recipe (spline, relabelled methyls, 24,000 steps, 100 ns).
set -e
cd /root/bgp4-m6
export PYTHONPATH=/root/bgp4-m6
L=/root/bgp4-long
D=$L/ala2-600K-100ns.h5
{ date -u; /usr/bin/time -f "simulate wall %e s" python -m bgp4.cli simulate --out $D --frames 1000000 --save-every 50 --replicas 4 --seed 0 --quiet; date -u; } >> $L/fab-best.log 2>&1
{ /usr/bin/time -f "train ML wall %e s" python -m bgp4.cli train --data $D --model spline --out $L/s100-aug-24k --steps 24000 --energy-steps 0 --batch 512 --augment --workers 1 --quiet; date -u; } >> $L/fab-best.log 2>&1
#!/bin/bash
# After the ML run: its 100k-sample baseline, a short FAB pilot for the step time, then FAB with
# the rest of the 2 h training budget. Usage: fab-stage.sh SNAPSHOT
set -e
S=${1:-/root/bgp4-m7}
cd $S; export PYTHONPATH=$S
L=/root/bgp4-long; D=$L/ala2-600K-100ns.h5; ML=$L/s100-aug-24k
log=$L/fab-stage.log
while [ ! -f $ML/complete.json ]; do sleep 20; done
{ date -u; /usr/bin/time -f "sample ML wall %e s" python -m bgp4.cli sample $ML --n 100000 --workers 2 --quiet; } >> $log 2>&1
common=(--data $D --init $ML --model spline --steps 0 --batch 512 --augment --objective fab --workers 2 --quiet)
if [ ! -f $L/fab-pilot-t/complete.json ]; then
  { date -u; python -m bgp4.cli train "${common[@]}" --energy-steps 80 --eval-every 40 --out $L/fab-pilot-t; } >> $log 2>&1
fi
ml_wall=3198  # the recipe's documented ML cost (run/results/spline-48-100ns-augment: 53.3 min); this run's own wall_s holds ~6 min of contention
steps=$(python - <<PY
import json
rows=[json.loads(l) for l in open('$L/fab-pilot-t/metrics.jsonl')]
rows=[r for r in rows if r.get('phase')=='energy' and r.get('step') in (40,80)]
per_step=(rows[-1]['wall_s']-rows[0]['wall_s'])/40
fill=rows[0]['wall_s']-40*per_step
budget=7200-$ml_wall-fill-120
print(int(budget/per_step)//100*100)
PY
)
echo "ML wall $ml_wall s; FAB steps $steps" >> $log
{ date -u; python -m bgp4.cli train "${common[@]}" --energy-steps $steps --eval-every 200 --out $L/s100-fab; date -u; } >> $log 2>&1
{ python -m bgp4.cli sample $L/s100-fab --n 100000 --workers 2 --quiet; date -u; } >> $log 2>&1
#!/bin/bash
S=/root/bgp4-m7; cd $S; export PYTHONPATH=$S
L=/root/bgp4-long; D=$L/ala2-600K-100ns.h5; ML=$L/s100-aug-24k
log=$L/kl-stage.log
{ date -u; python -m bgp4.cli train --data $D --init $ML --model spline --steps 0 --batch 512 --augment --objective kl --energy-steps 9000 --eval-every 500 --workers 2 --out $L/s100-kl --quiet; date -u; } >> $log 2>&1
{ python -m bgp4.cli sample $L/s100-kl --n 100000 --workers 2 --quiet; date -u; } >> $log 2>&1
{ python -m bgp4.cli analyze $ML $L/s100-kl --data $D --out $L/report-ml-kl --workers 2; date -u; } >> $log 2>&1
#!/usr/bin/env bash
# Issue 28: FAB at batch 2048 from the best 600 K ML recipe (snapshot m20 = dbd26ce)
set -euo pipefail
export PYTHONPATH=/root/bgp4-m20
b() { python -c "import sys; from bgp4.cli import main; sys.argv[0]='bgp4'; main()" "$@"; }
out=/root/bgp4-long/energy
data=$out/ala2-600K-100ns.h5
cd $out
date; b simulate --out "$data" --frames 1000000 --save-every 50 --replicas 4 --seed 0 --quiet; date
b train --data "$data" --model spline --out "$out/ml" --steps 24000 --energy-steps 0 --batch 512 \
  --augment --workers 1 --quiet; date
b train --data "$data" --init "$out/ml" --model spline --steps 0 --batch 2048 --augment \
  --objective fab --energy-steps 1000 --eval-every 100 --workers 2 --out "$out/fab2048" --quiet; date
# then (post.sh): 100,000 samples of each and one report
python -m bgp4.cli sample $out/ml --n 100000 --workers 2 --quiet
python -m bgp4.cli sample $out/fab2048 --n 100000 --workers 2 --quiet
python -m bgp4.cli analyze $out/ml $out/fab2048 --data $data --out $out/report-ml-fab2048 --workers 2
# Probes of FAB's settings at batch 2048 from the same ML run (session of 2026-11-28, 17:05-; snapshot m20 = dbd26ce),
# each on one core (OMP_NUM_THREADS=1) beside the 300 K replica-exchange runs on the other
export OMP_NUM_THREADS=1
python -m bgp4.cli train --data $data --init $out/ml --model spline --steps 0 --batch 2048 --augment \
  --objective fab --energy-steps 300 --eval-every 100 --energy-lr 3e-4 --workers 2 --out $out/fab2048-lr3e-4 --quiet
python run/scripts/ess_checkpoint.py $out/ml $out/fab2048-lr3e-4 --n 20000
python run/scripts/ess_checkpoint.py $out/ml $out/fab2048 --n 20000
python -m bgp4.cli train --data $data --init $out/ml --model spline --steps 0 --batch 2048 --augment \
  --objective fab --energy-steps 600 --eval-every 100 --energy-lr 1e-4 --fab-reuse 8 --workers 2 --out $out/fab2048-r8 --quiet
python run/scripts/ess_checkpoint.py $out/ml $out/fab2048-r8 --n 20000
# Session of 2026-11-28, 19:38-: independence moves alone in FAB's AIS (no MALA moves, so no backward pass
# through the flow), one core beside the 300 K replica exchange and a sweep on the two cores; snapshot m20 = dbd26ce
python -m bgp4.cli train --data $data --init $out/ml --model spline --steps 0 --batch 2048 --augment \
  --objective fab --energy-steps 600 --eval-every 100 --energy-lr 1e-4 --fab-moves 0 --fab-independence 2 \
  --workers 2 --out $out/fab2048-imh --quiet
python run/scripts/ess_checkpoint.py $out/ml $out/fab2048-imh --n 20000
# the cost of one AIS run, MALA against independence moves alone, in alternation (from the repository root)
python run/bench/bench_fab_ais.py $out/ml --n 2048 --repeats 3 --threads 1 --workers 1
python run/bench/bench_refine_cost.py $out/ml --n 2048 --repeats 5 --threads 1 --workers 1 --compile
# Session of 2026-11-29 (session 13): the energy phase's rate decayed (cosine, 1e-4 to 1e-6 over 600 steps),
# otherwise the fab2048-r8 probe; one core beside the tetrapeptide's replica exchange; snapshot m22 = d32cd43
python -m bgp4.cli train --data $data --init $out/ml --model spline --steps 0 --batch 2048 --augment \
  --objective fab --energy-steps 600 --eval-every 100 --energy-lr 1e-4 --energy-lr-schedule cosine --fab-reuse 8 \
  --workers 1 --out $out/fab2048-r8-cos --quiet
python run/scripts/ess_checkpoint.py $out/ml $out/fab2048-r8-cos --n 20000

# Session 20 (2026-12-02): the levers together from the remade ML run (ml-remake, at 9f6a542 = snapshot m28):
# batch 2048, 8 gradient steps per AIS batch, cosine decay 1e-4 -> 1e-6, 2,000 steps (8.8e6 evaluations);
# one thread, beside a replica exchange on the other core (paused at times: not a timing)
python -m bgp4.cli train --data $data --init $out/ml --model spline --steps 0 --batch 2048 --augment \
  --objective fab --energy-steps 2000 --fab-reuse 8 --energy-lr-schedule cosine --eval-every 100 \
  --workers 1 --out $out/fab-levers --quiet
python -m bgp4.cli sample $out/fab-levers --n 100000 --workers 1 --quiet
python -m bgp4.cli analyze $out/ml $out/fab-levers --data $data --out $out/report-levers
