"""Mean NLL (nats per frame, Cartesian density in nm) of finished runs on the frames of a data file
that come after the frames they were trained on: a test set held out in time, not a random split of
neighbouring frames (REMD frames 0.1 ps apart are strongly correlated with their neighbours).

    python held_out_nll.py DATA.h5 --after 94390 RUN [RUN ...] [--every 5] [--json OUT]

Each run's own split is also measured (its random test frames) when it trained on DATA's first
frames, so the two held-out estimates sit side by side; "paired" is each run's per-frame NLL minus
the first run's on the same later frames (mean and standard error: a sharper comparison than two
means).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from bgp4.generator.model import load_generator
from bgp4.simulation.data import load_trajectory


def nll_values(bg, xyz: np.ndarray, batch: int = 2048) -> np.ndarray:
    """-log q (n,) nats of each frame."""
    with torch.no_grad():
        values = [bg.nll(torch.as_tensor(xyz[i : i + batch])) for i in range(0, len(xyz), batch)]
    return torch.cat(values).double().numpy()


def mean_se(values: np.ndarray) -> tuple[float, float, int]:
    """Mean and standard error of the finite values, and how many were finite."""
    values = values[np.isfinite(values)]
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(len(values))), int(len(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--after", type=int, required=True, help="first frame index of the held-out part")
    parser.add_argument("--every", type=int, default=5, help="take every n-th held-out frame")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    xyz = load_trajectory(args.data).xyz
    later = xyz[args.after :: args.every]
    out = {"data": args.data, "after": args.after, "every": args.every, "later_frames": len(later), "runs": {}}
    first = None
    for run in args.runs:
        bg = load_generator(Path(run) / "model.pt")
        split = np.load(Path(run) / "split.npz")
        values = nll_values(bg, later)
        first = values if first is None else first
        row = {"later": mean_se(values), "paired": mean_se(values - first)}
        if split["test"].max() < args.after:
            row["random_test"] = mean_se(nll_values(bg, xyz[split["test"]]))
        out["runs"][run] = row
        print(run, json.dumps(row))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
