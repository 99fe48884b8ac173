# As run (session 16, 2026-11-29), from /root/bgp4-long; bgp4 = python -c 'from bgp4.cli import main; main()' with PYTHONPATH=SNAPSHOT
# seed 4: snapshot m23 = f685fa2; seed 5 and the probes: snapshot m24 = 25f8f1c (same simulate code)
## dense.sh
set -euo pipefail
export PYTHONPATH=/root/bgp4-m23 OMP_NUM_THREADS=1 PATH=/root/bgp4-long/bin:$PATH
cd /root/bgp4-long/data
date; bgp4 simulate --out ala2-300K-remd-dense-s4.h5 --temperature 300 --constraints none \
  --replica-exchange 300:600:4 --frames 250000 --save-every 100 --equilibration-ps 100 --seed 4 \
  --velocity-refresh exchange --quiet; date
[ -f dense-s4-check.json ] || python /root/bgp4-m23/run/scripts/remd_check.py ala2-300K-remd-dense-s4.h5 \
  ala2-300K-remd.h5 --json dense-s4-check.json | tee dense-s4-check.txt
cd /root/bgp4-long
bash /root/bgp4-m23/run/scripts/step_probe.sh data/ala2-300K-remd-dense-s4.h5 denseprobe 1000 4000; date
## dense5.sh
set -euo pipefail
export PYTHONPATH=/root/bgp4-m24 OMP_NUM_THREADS=1 PATH=/root/bgp4-long/bin:$PATH
cd /root/bgp4-long/data
date; bgp4 simulate --out ala2-300K-remd-dense-s5.h5 --temperature 300 --constraints none \
  --replica-exchange 300:600:4 --frames 250000 --save-every 100 --equilibration-ps 100 --seed 5 \
  --velocity-refresh exchange --quiet; date
[ -f dense-s5-check.json ] || python /root/bgp4-m24/run/scripts/remd_check.py ala2-300K-remd-dense-s5.h5 \
  ala2-300K-remd.h5 --json dense-s5-check.json | tee dense-s5-check.txt
while [ ! -f dense-s4-check.json ]; do sleep 60; done
[ -f ala2-300K-remd-dense-x2.h5 ] || python /root/bgp4-m24/run/scripts/merge_data.py ala2-300K-remd-dense-x2.h5 \
  ala2-300K-remd-dense-s4.h5 ala2-300K-remd-dense-s5.h5
cd /root/bgp4-long
bash /root/bgp4-m24/run/scripts/step_probe.sh data/ala2-300K-remd-dense-x2.h5 denseprobe-x2 4000; date
## dense-long.sh
set -euo pipefail
export PYTHONPATH=/root/bgp4-m24 OMP_NUM_THREADS=1 PATH=/root/bgp4-long/bin:$PATH
cd /root/bgp4-long
while [ ! -f data/ala2-300K-remd-dense-x2.h5 ] || pgrep -f "bash dense.sh" > /dev/null; do sleep 30; done
date; bash /root/bgp4-m24/run/scripts/step_probe.sh data/ala2-300K-remd-dense-x2.h5 denseprobe-x2 10000; date
## dense-sweep.sh (session 17, 2026-11-29 10:14-12:21; snapshot m25 = 492007e), STEPS=10000 W=2
export PYTHONPATH=/root/bgp4-m25 OMP_NUM_THREADS=1
d=/root/bgp4-long/data/ala2-300K-remd-dense-x2.h5
cd /root/bgp4-long/bench300
bgp4 sweep --data $d --models spline,spline-p4inv --seeds 3 --steps 10000 --eval-every 500 \
  --samples 20000 --batch 512 --augment --objective ml --energy-steps 0 --refine 20 --refine-steps 0 \
  --workers 2 --threads-per-run 1 --out ala2-dense --quiet
# then (started 12:21, paused for CI, not finished this session): FAB after the spline runs
bgp4 sweep --init ala2-dense --data $d --models spline --seeds 3 --steps 0 --objective fab \
  --energy-steps 600 --eval-every 100 --samples 20000 --batch 2048 --augment --refine 20 --refine-steps 0 \
  --workers 2 --threads-per-run 1 --out ala2-dense-fab2048 --quiet
python run/scripts/benchmark_table.py --dipeptide bench300/ala2 --dipeptide bench300/ala2-dense \
  --dipeptide bench300/ala2-fab2048 --dipeptide bench300/ala2-fab2048-x2 --tetrapeptide bench300/ala4 \
  --out run/results/benchmark-300K/table-v3.md
