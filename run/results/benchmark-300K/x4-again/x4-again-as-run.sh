#!/usr/bin/env bash
# Session 49: the 1,000,000 dense 300 K frames again (run/long_runs.sh's dense runs, seeds 4-7, two at a
# time), merged to x4, then the x4 sweep at 100,000 samples a seed (issue 27's AIS(48) target by the
# table's clipping rule). Every step resumes: rerun this script after a kill (setsid, autogroup nice 19:
# see run/long_runs.sh). One sweep worker of 2 threads: 3 seeds at about 38 min each on a quiet machine.
set -uo pipefail
export PYTHONPATH=/root/s49/snap  # snapshot of 8c575c6: edits in /work/main do not reach these runs
d=/root/s49/data
dense() {  # seed
  bgp4 simulate --out $d/ala2-300K-remd-dense-s$1.h5 --temperature 300 --constraints none \
    --replica-exchange 300:600:4 --frames 250000 --save-every 100 --equilibration-ps 100 --seed $1 \
    --velocity-refresh exchange --quiet > /root/s49/sim-s$1.log 2>&1
}
date -u +"%F %T start"
[ -f $d/ala2-300K-remd-dense-s4.h5 ] || dense 4 & 
[ -f $d/ala2-300K-remd-dense-s5.h5 ] || dense 5 &
wait
date -u +"%T s4 s5 done"
[ -f $d/ala2-300K-remd-dense-s6.h5 ] || dense 6 &
[ -f $d/ala2-300K-remd-dense-s7.h5 ] || dense 7 &
wait
date -u +"%T s6 s7 done"
for s in 4 5 6 7; do [ -f $d/ala2-300K-remd-dense-s$s.h5 ] || { echo "seed $s missing"; exit 1; }; done
[ -f $d/ala2-300K-remd-dense-x4.h5 ] || bgp4 merge $d/ala2-300K-remd-dense-x4.h5 $d/ala2-300K-remd-dense-s{4,5,6,7}.h5
date -u +"%T merged"
cd /root/s49 && bgp4 sweep --data $d/ala2-300K-remd-dense-x4.h5 --models spline --seeds 3 --steps 20000 \
  --eval-every 500 --samples 100000 --batch 512 --augment --objective ml --energy-steps 0 --refine 48 \
  --refine-steps 0 --workers 1 --threads-per-run 2 --worker-memory 16 --out x4 --quiet
date -u +"%T swept"

# Then, with the code of the working tree (a commit after f285faa, for --rama-bins), from /root/s49:
#   bgp4 analyze --sweep x4 --rama-bins 100                   # the table's grid for the KL and TV
#   python /work/main/run/scripts/ess_by_count.py x4/runs/spline-s{0,1,2}/samples.h5 \
#     x4/runs/spline-s{0,1,2}/samples-refined.h5 --counts 20000  # plain, table's rule, former rule
#   python /work/main/run/scripts/benchmark_table.py --dipeptide x4
