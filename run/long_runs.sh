#!/usr/bin/env bash
# The long MD data sets behind the tetrapeptide, hexapeptide and 300 K benchmark studies.
#
# Every command resumes where a killed run stopped, so run this script again (or one of its lines)
# until every file exists. Each line names its cost on the 2-core CPU machine. They share the cores:
# run them one after another, or at low priority beside other work. On Linux with automatic
# process groups (/proc/sys/kernel/sched_autogroup_enabled = 1, the default on most desktops and
# these machines) `nice -n 19` only ranks processes within one terminal session; against work
# started from another session the niced runs still take an equal share of the cores, and a torch
# training run with 2 threads beside them slowed 30-40-fold (0.13 s to 4-7 s per spline step).
# Lower the session's whole group instead:
#
#   setsid bash run/long_runs.sh OUT > long_runs.log 2>&1 &  echo 19 > /proc/$!/autogroup
#
# With the group at nice 19 a 2-thread spline training beside these runs kept its quiet speed
# (8.4-8.9 steps/s, against 8.8 with them paused). Anything else started at normal priority beside
# a timed run (a test suite, a second training) still costs it several-fold; to be sure, pause the
# MD runs (`kill -STOP PID...`, later `kill -CONT PID...`).
#
#   bash run/long_runs.sh [OUT]        # OUT defaults to data/
set -euo pipefail
out="${1:-data}"
mkdir -p "$out"

# Issue 26: the 600 K tetrapeptide and hexapeptide sets (2 x 50 ns each) are the first step of
# run/peptide_600K.sh, which trains on them (the tetrapeptide: about 0.7 ns/min per replica,
# so about 75 min on both cores).

# Issue 27: alanine dipeptide at 300 K without constraints (60 flow dims), replica exchange over
# 300, 378, 476 and 600 K, 0.5 ps per iteration: 25 ns kept at 300 K (100 ns of MD). About 1.1 h on one core.
# Data made before 2280ddb is biased hot (0.76 kJ/mol in the mean potential energy; the velocity
# redraw heated the fast modes, see bgp4/simulation/_remd_move.py): make it again.
bgp4 simulate --out "$out/ala2-300K-remd.h5" --temperature 300 --constraints none \
  --replica-exchange 300:600:4 --frames 50000 --save-every 500 --equilibration-ps 100 --seed 0 --quiet

# Issue 27, the dense data behind the 10,000-step ML rows: the same replica exchange keeping a frame
# every 0.1 ps (100-step iterations; --velocity-refresh exchange redraws the velocities of exchanged
# walkers only, so short iterations leave the 300 K distribution alone). 250,000 frames (25 ns at
# 300 K, 100.4 ns of MD) per seed, about 1.8 h on one core each; the two seeds merged: 500,000 frames.
dense_run() {  # seed [force field: the default amber99sb-ildn, or amber96]
  local ff="${2:-amber99sb-ildn}" name=ala2
  [ "$ff" = amber99sb-ildn ] || name="ala2-$ff"
  bgp4 simulate --out "$out/$name-300K-remd-dense-s$1.h5" --temperature 300 --constraints none \
    --replica-exchange 300:600:4 --frames 250000 --save-every 100 --equilibration-ps 100 --seed "$1" \
    --velocity-refresh exchange --forcefield "$ff" --quiet
}
dense_run 4
dense_run 5
[ -f "$out/ala2-300K-remd-dense-x2.h5" ] || bgp4 merge \
  "$out/ala2-300K-remd-dense-x2.h5" "$out/ala2-300K-remd-dense-s4.h5" "$out/ala2-300K-remd-dense-s5.h5"
# Two more seeds, the same way, for 1,000,000 frames (x4; run/benchmark_300K.sh with
# DENSE_FILE=ala2-300K-remd-dense-x4.h5): each doubling of the frames has raised the ML rows so far.
# About 2.2 h on one core each beside one other run (30-34 s per 1,000 iterations, measured in session 20).
dense_run 6
dense_run 7
[ -f "$out/ala2-300K-remd-dense-x4.h5" ] || bgp4 merge \
  "$out/ala2-300K-remd-dense-x4.h5" "$out"/ala2-300K-remd-dense-s{4,5,6,7}.h5
# A fifth seed, kept out of every training file: the held-out run the TV target is scored against
# (run/results/benchmark-300K/million-frames.md, "The TV target against a fifth, held-out run"). 1 h 41 min on one core
# beside a replica exchange.
dense_run 8
# Four more seeds for 2,000,000 frames (x8; run/results/benchmark-300K/x8/, session 51), seed 8
# still held out: about 2 h on one core each, two at a time beside nothing else.
for seed in 9 10 11 12; do dense_run "$seed"; done
[ -f "$out/ala2-300K-remd-dense-x8.h5" ] || bgp4 merge \
  "$out/ala2-300K-remd-dense-x8.h5" "$out"/ala2-300K-remd-dense-s{4,5,6,7,9,10,11,12}.h5

# Issue 27: alanine tetrapeptide at 300 K without constraints (120 flow dims), replica exchange over
# 6 temperatures from 300 to 600 K, 25 ns kept at 300 K (150.6 ns of MD). About 5 h on one core
# (measured: about 6 min per 1,000 iterations on a quiet core; run/results/benchmark-300K/).
bgp4 simulate --molecule alanine-tetrapeptide --out "$out/ala4-300K-remd.h5" --temperature 300 --constraints none \
  --replica-exchange 300:600:6 --frames 50000 --save-every 500 --equilibration-ps 100 --seed 0 --quiet

# Issue 27: the tetrapeptide's dense 300 K data, as the dipeptide's dense runs (a frame every 0.1 ps,
# velocities drawn anew only at exchanges): 250,000 frames at 300 K (25 ns). About 6.5-8 h on one core.
bgp4 simulate --molecule alanine-tetrapeptide --out "$out/ala4-300K-remd-dense-s4.h5" --temperature 300 \
  --constraints none --replica-exchange 300:600:6 --frames 250000 --save-every 100 --equilibration-ps 100 --seed 4 \
  --velocity-refresh exchange --quiet

# Issue 27 on the published tetrapeptide target: TA-BG's code holds the X-H bonds (bgp4's default
# system, 98 flow dims; run/results/benchmark-300K/tetrapeptide.md, "The published tetrapeptide target"). The same
# dense run with the bonds held: 2 fs steps, a frame every 50 (0.1 ps), half the steps of the run above:
# about 3.5-4 h on one core (estimated from that run's 6.5-8 h).
bgp4 simulate --molecule alanine-tetrapeptide --out "$out/ala4-hbonds-300K-remd-dense-s4.h5" --temperature 300 \
  --replica-exchange 300:600:6 --frames 250000 --save-every 50 --equilibration-ps 100 --seed 4 \
  --velocity-refresh exchange --quiet

# Issue 27 on the published dipeptide target: openmmtools' AlanineDipeptideImplicit (Amber ff96 with
# OBC1), which `--forcefield amber96` builds; the dipeptide rows above are on amber99sb-ildn with OBC2,
# another Hamiltonian (2.0 kT rms apart on the 300 K frames). The same four dense runs, merged; about
# 6-9 h of one core each (estimated), 4-6x the amber99sb-ildn runs: OBC1 is a CustomGBForce, so `auto` runs
# it on the CPU platform (3,000-4,200 steps/s here; Reference: about 530). Train on it into another OUT than the amber99sb-ildn rows: ONLY_DENSE=1
# DENSE_FILE=ala2-amber96-300K-remd-dense-x4.h5 DENSE_STEPS=32000 DENSE_KEEP_BEST=1 SAMPLES=20000 bash run/benchmark_300K.sh OUT-amber96 OUT.
for seed in 4 5 6 7; do dense_run "$seed" amber96; done
[ -f "$out/ala2-amber96-300K-remd-dense-x4.h5" ] || bgp4 merge \
  "$out/ala2-amber96-300K-remd-dense-x4.h5" "$out"/ala2-amber96-300K-remd-dense-s{4,5,6,7}.h5

# Issue 27: the plain 300 K MD that checks the replica-exchange data (python run/scripts/remd_check.py):
# 2 x 200 ns, 1 ps per frame. About 3.3 h on both cores (1 ns/min per replica). The mean energy is
# checked within 100 ns (standard error 0.06 kJ/mol); P(phi > 0) is not: in 2 x 50 ns the dipeptide
# crossed to phi > 0 nine times and came straight back each time (1 ps), so plain MD needs
# microseconds for it. The run resizes: rerun with a larger --frames to go on.
bgp4 simulate --out "$out/ala2-300K-md.h5" --temperature 300 --constraints none \
  --frames 400000 --save-every 1000 --replicas 2 --equilibration-ps 100 --seed 0 --quiet
