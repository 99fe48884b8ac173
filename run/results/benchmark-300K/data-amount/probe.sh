#!/usr/bin/env bash
# How many frames: the 600 K recipe (spline, 48 dims, every X-H bond fixed) that reaches a reverse
# ESS of 0.80 on 1,000,000 frames (4 x 25 ns), trained on 50,000 of them spaced as the 300 K
# replica-exchange data are (one 25 ns trajectory, a frame every 0.5 ps), and on the full file at
# the same step counts. One seed, 20,000 samples a run.
#   SNAPSHOT=<checkout> WORK=<dir holding ala2-600K-100ns.h5> bash probe.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export PYTHONPATH="$SNAPSHOT" OMP_NUM_THREADS=1
cd "$WORK"
[ -f ala2-600K-25ns-0.5ps.h5 ] || python "$here/../../../scripts/subset_data.py" ala2-600K-25ns-0.5ps.h5 \
  ala2-600K-100ns.h5 --frames 50000 --stride 5
bash "$here/../../../scripts/step_probe.sh" ala2-600K-25ns-0.5ps.h5 sub50k 250 1000 4000
bash "$here/../../../scripts/step_probe.sh" ala2-600K-100ns.h5 full 250 1000 4000
