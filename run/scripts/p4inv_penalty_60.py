"""Does a small P4Inv bound penalty keep the last P4Inv layers inside the merge bounds at 60 dims?

    python run/scripts/p4inv_penalty_60.py [--data out/data/ala2-600K.h5] [--out out/penalty60]
           [--weights 0 0.001 0.01] [--steps 5000] [--parallel 2]

Trains the paper's P4Inv generator in the paper's 60-dim setup (`--no-fix-constrained`, where the
last layers' log|det A| climbs past C1_max = 15.5 and merges are skipped or forced) once per
penalty weight C_p (`bgp4 train --penalty-weight`), likelihood phase only, the runs side by side
with one torch thread each. Then prints, per weight: merges accepted / skipped / forced, the
largest log|G det A| over the layers and those of the last three layers, the test NLL, and the
wall time. Runs are resumable (rerun the same command); finished ones are only read.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

__all__ = ["train_command", "layer_log_dets", "main"]


def train_command(data: Path, run: Path, weight: float, steps: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bgp4.cli",
        "train",
        "--data",
        str(data),
        "--model",
        "p4inv",
        "--out",
        str(run),
        "--no-fix-constrained",
        "--steps",
        str(steps),
        "--energy-steps",
        "0",
        "--penalty-weight",
        str(weight),
        "--workers",
        "1",
        "--quiet",
    ]


def layer_log_dets(run: Path) -> list[float]:
    """log|G det A| of every P4Inv layer of the run's model, in flow order."""
    from bgp4.flows import P4InvLinear
    from bgp4.generator.model import load_generator

    bg = load_generator(run / "model.pt")
    with torch.no_grad():
        return [float(m.slogdet()[1]) for m in bg.flow.modules() if isinstance(m, P4InvLinear)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("out/data/ala2-600K.h5"))
    parser.add_argument("--out", type=Path, default=Path("out/penalty60"))
    parser.add_argument("--weights", type=float, nargs="+", default=[0.0, 1e-3, 1e-2])
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--parallel", type=int, default=2, help="runs trained at once (one torch thread each)")
    a = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    runs = {w: a.out / f"w{w:g}" for w in a.weights}
    pending = list(runs.items())
    while pending:
        batch, pending = pending[: a.parallel], pending[a.parallel :]
        procs = [subprocess.Popen(train_command(a.data, run, w, a.steps), env=env) for w, run in batch]
        if any(p.wait() != 0 for p in procs):
            sys.exit("a training run failed; rerun to resume")
    rows = []
    for w, run in runs.items():
        done = json.loads((run / "complete.json").read_text())
        dets = layer_log_dets(run)
        rows.append(
            {
                "penalty_weight": w,
                "accepted": done.get("p4inv_accepted"),
                "skipped": done.get("p4inv_skipped"),
                "forced": done.get("p4inv_forced"),
                "max_log_det": round(max(dets), 2),
                "last_three_log_det": [round(d, 2) for d in dets[-3:]],
                "layers_above_c1_max": sum(d > 15.5 for d in dets),
                "test_nll": round(done["test_nll_end"], 2),
                "wall_s": done["wall_s"],
            }
        )
    for row in rows:
        print(json.dumps(row))
    (a.out / "summary.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
