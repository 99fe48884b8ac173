#!/usr/bin/env bash
# Frames or nanoseconds: probe.sh found 50,000 frames (25 ns, a frame every 0.5 ps) cap the 600 K recipe
# where 1,000,000 (100 ns, every 0.1 ps) do not. Two more subsets of the same file split the two causes:
#   spread50k: 50,000 frames spread over all 100 ns (every 20th frame): the same count, 4x the nanoseconds;
#   dense250k: 250,000 frames of the first 25 ns (every frame): the same nanoseconds, 5x the frames.
# Same steps, seed and samples as probe.sh.
#   SNAPSHOT=<checkout> WORK=<dir holding ala2-600K-100ns.h5> bash probe2.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
scripts="$here/../../../scripts"
export PYTHONPATH="$SNAPSHOT" OMP_NUM_THREADS=1
cd "$WORK"
[ -f ala2-600K-100ns-every20.h5 ] || python "$scripts/subset_data.py" ala2-600K-100ns-every20.h5 \
  ala2-600K-100ns.h5 --frames 50000 --stride 20
[ -f ala2-600K-25ns-0.1ps.h5 ] || python "$scripts/subset_data.py" ala2-600K-25ns-0.1ps.h5 \
  ala2-600K-100ns.h5 --frames 250000 --stride 1
bash "$scripts/step_probe.sh" ala2-600K-100ns-every20.h5 spread50k 250 1000 4000
bash "$scripts/step_probe.sh" ala2-600K-25ns-0.1ps.h5 dense250k 250 1000 4000
