#!/usr/bin/env bash
# The four generator kinds with every constrained bond fixed (48 flow dims), trained one after
# another on the same MD data, 100,000 samples each (raw and, with REFINE=K, refined by AIS),
# one report. Every step is resumable: run the script again and it finishes what is left.
#   bash run/scripts/kinds_48.sh DATA OUT [budget: short|paper]
# short: rnvp/p4inv 6,000 + 500 steps (about 5 + 7 min each on 2 CPU cores); spline kinds
#        6,000 + 1,500 steps at batch 512 (about 40 min each)
# paper: rnvp/p4inv the paper's 40,000 + 2,000 steps; spline kinds as in short
set -euo pipefail
data="${1:?MD data file from bgp4 simulate}"
out="${2:-out/kinds-48}"
budget="${3:-short}"
refine="${REFINE:-0}"
kinds="${KINDS:-rnvp p4inv spline spline-p4inv}"
paper_short=(--steps 6000 --energy-steps 500)
[[ "$budget" == paper ]] && paper_short=()
spline=(--steps 6000 --energy-steps 1500 --batch 512 --energy-weight 1.0 --energy-lr 3e-5)
runs=()
for kind in $kinds; do
    if [[ "$kind" == spline* ]]; then args=("${spline[@]}"); else args=("${paper_short[@]}"); fi
    bgp4 train --data "$data" --model "$kind" --out "$out/$kind" "${args[@]}" --quiet
    bgp4 sample "$out/$kind" --n 100000 --quiet
    if (( refine > 0 )); then bgp4 sample "$out/$kind" --n 100000 --refine "$refine" --refine-steps 2 --refine-independence 0 --quiet; fi
    runs+=("$out/$kind")
done
bgp4 analyze --data "$data" "${runs[@]}" --out "$out/report"
