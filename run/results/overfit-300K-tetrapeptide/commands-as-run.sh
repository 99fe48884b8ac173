#!/usr/bin/env bash
# What ran for this study (session 30, 2026-12-03, HEAD a6d6dae and its working tree), in /root/bgp4-long, with
# the dense 300 K replica exchange of run/long_runs.sh going on beside it at the lowest priority.
export OMP_NUM_THREADS=1
D95=snap/ala4-300K-remd-dense-s4-first95.h5    # its first 95 sealed segments: 94,390 frames (9.4 ns), as in torsion-reach
D184=snap/ala4-300K-remd-dense-s4-first184.h5  # its first 184 sealed segments: 182,240 frames (18.2 ns), written 17:40
# the 184-segment snapshot, written like the 95-segment one (`snapshot` in ../fab-scratch-tetrapeptide-300K/commands-as-run.sh)
snapshot ala4-300K-remd-dense-s4-first184 184 182240
# the probes: one seed each, every setting the same but the one named (runs h256, h128, h64, wd1.0, wd3.0, wd10)
probe() {  # NAME [FLAGS]
  local name=$1; shift
  bgp4 train --data $D95 --model spline --steps 1500 --keep-best --eval-every 250 --batch 512 --augment \
    --energy-steps 0 --workers 1 --device cpu --seed 0 --out $name --quiet "$@"
  bgp4 sample $name --n 20000 --workers 1 --quiet
  bgp4 analyze $name --data $D95 --out $name-report --workers 1
}
probe h256
probe h128 --hidden 128
probe h64 --hidden 64
probe wd1.0 --weight-decay 1.0
probe wd3.0 --weight-decay 3.0
probe wd10 --weight-decay 10.0
# seed 1 of the plain recipe and of weight decay 3 (probe's --seed 0, then --seed 1: the last one counts)
probe wd3.0-s1 --weight-decay 3.0 --seed 1
probe h256-s1 --seed 1
# weight decay 3 on the first 18.2 ns: 3,000 steps, then 20,000 samples refined by AIS(48)
bgp4 train --data $D184 --model spline --weight-decay 3.0 --steps 3000 --keep-best --eval-every 250 \
  --batch 512 --augment --energy-steps 0 --workers 1 --device cpu --seed 0 --out wd3-184 --quiet
bgp4 sample wd3-184 --n 20000 --refine 48 --refine-steps 0 --workers 1 --quiet
bgp4 analyze wd3-184 --data $D184 --out wd3-184-report --workers 1   # -> report-18ns/
# weight decay 3 on 9.4 ns, refined by AIS(48) too
bgp4 sample wd3.0 --n 20000 --refine 48 --refine-steps 0 --workers 1 --quiet
bgp4 analyze wd3.0 --data $D95 --out wd3.0-report-ais --workers 1
# the NLL on the frames after the first 94,390 (held out in time), every 5th: 17,570 frames
python held_out_nll.py $D184 h256 h128 h64 wd1.0 wd3.0 wd10 runs/ala4-dense95-ml-2000-reach --after 94390 --every 5 --json held-out-nll.json
python held_out_nll.py $D184 h256-s1 wd3.0-s1 --after 94390 --every 5 --json held-out-nll-s1.json
# session 31: all 25 ns (the finished replica exchange, D25); the chain's run, 3,000 steps -> report-25ns/
D25=data/ala4-300K-remd-dense-s4.h5
bgp4 train --data $D25 --model spline --weight-decay 3.0 --steps 3000 --keep-best --eval-every 250 --batch 512 --augment \
  --energy-steps 0 --workers 1 --device cpu --seed 0 --out runs/ala4-dense-ml-s0 --quiet
bgp4 sample runs/ala4-dense-ml-s0 --n 20000 --refine 48 --refine-steps 0 --workers 2 --quiet
bgp4 analyze runs/ala4-dense-ml-s0 --data $D25 --out report-ala4-dense --workers 1   # -> report-25ns/
# the same with 6,000 steps -> report-25ns-6000/
bgp4 train --data $D25 --model spline --weight-decay 3.0 --steps 6000 --keep-best --eval-every 250 --batch 512 --augment \
  --energy-steps 0 --workers 1 --device cpu --seed 0 --out wd3-6000 --quiet
bgp4 sample wd3-6000 --n 20000 --refine 48 --refine-steps 0 --workers 1 --quiet
bgp4 analyze wd3-6000 --data $D25 --out wd3-6000-report --workers 1
# the plain recipe (session 29's: 2,500 keep-best steps, no decay) on the same 25 ns
bgp4 train --data $D25 --model spline --steps 2500 --keep-best --eval-every 250 --batch 512 --augment \
  --energy-steps 0 --workers 1 --device cpu --seed 0 --out runs/ala4-dense-ml-plain-s0 --quiet
bgp4 sample runs/ala4-dense-ml-plain-s0 --n 20000 --refine 48 --refine-steps 0 --workers 1 --quiet
bgp4 analyze runs/ala4-dense-ml-s0 runs/ala4-dense-ml-plain-s0 --data $D25 --out report-ala4-dense-plain --workers 1
# AIS with MALA moves on the 18.2 ns run: 24 levels, one MALA move beside each independence move
bgp4 sample wd3-184 --n 20000 --refine 24 --refine-steps 1 --workers 1 --quiet --out mala24.h5
# its ESS (mala24.json): bgp4.analysis.weights.reverse_ess and clipped_reverse_ess of mala24-refined.h5's log_w
python -c "import tables; from bgp4.analysis.weights import reverse_ess as r, clipped_reverse_ess as c; lw = tables.open_file('mala24-refined.h5').root.log_w[:]; print(r(lw), c(lw))"
