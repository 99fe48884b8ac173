#!/usr/bin/env bash
# Likelihood step count for a small data set: one seed, one run per step count (each with its own
# cosine schedule), 20,000 samples each, and a table of test NLL, reverse ESS (raw and clipped),
# forward ESS and mean sample energy. On 50,000 frames of alanine dipeptide at 300 K the ESS was
# best at 250 steps and fell after (run/results/benchmark-300K/ml-50000-frames.md); `--keep-best` on a long run does
# not stand in for this probe (same study).
#
#   bash run/scripts/step_probe.sh DATA OUT [STEPS ...]     # default steps 125 250 500 1000
#   MODEL=spline SEED=0 SAMPLES=20000 WORKERS=1 by default; resumable (every stage is).
set -euo pipefail
data="$1"
out="$2"
shift 2
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(125 250 500 1000)
model="${MODEL:-spline}"
seed="${SEED:-0}"
samples="${SAMPLES:-20000}"
workers="${WORKERS:-1}"
for n in "${steps[@]}"; do
  [[ $n =~ ^[0-9]+$ ]] || { echo "step counts must be whole numbers, got '$n'" >&2; exit 2; }
done
mkdir -p "$out"
for n in "${steps[@]}"; do
  run="$out/$model-s$n"
  bgp4 train --data "$data" --model "$model" --out "$run" --steps "$n" --eval-every "$(( n < 5 ? 1 : n < 500 ? n / 5 : 100 ))" \
    --batch 512 --augment --objective ml --energy-steps 0 --seed "$seed" --workers "$workers" --quiet
  bgp4 sample "$run" --n "$samples" --workers "$workers" --quiet
  bgp4 analyze "$run" --data "$data" --out "$run/report" --workers "$workers" > /dev/null
done
python - "$out" "$model" "${steps[@]}" <<'PY'
import json
import sys
from pathlib import Path

out, model, steps = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
print("| likelihood steps | test NLL | reverse ESS | clipped | forward ESS | mean energy (kT) |")
print("|---|---|---|---|---|---|")
for n in steps:
    run = out / f"{model}-s{n}"
    test_nll = json.loads((run / "complete.json").read_text())["test_nll_end"]
    m = next(iter(json.loads((run / "report" / "metrics.json").read_text())["models"].values()))
    cells = [m.get(k) for k in ("reverse_ess", "reverse_ess_clipped", "forward_ess", "mean_energy_kT")]
    text = " | ".join("-" if c is None else f"{c:.3g}" for c in cells)
    print(f"| {n} | {test_nll:.2f} | {text} |")
PY
