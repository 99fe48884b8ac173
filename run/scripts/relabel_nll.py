"""Test and training NLL of a run's model on frames as simulated and with methyl hydrogens relabelled.

    python run/scripts/relabel_nll.py RUN [--data D] [--frames 20000] [--seed 0]

For each split (the run's own train/test split) it scores the same random frames three ways:
as simulated, and with every methyl-like hydrogen triple (`bgp4.simulation.atoms.rotor_hydrogens`)
relabelled by one and by two positions. The relabelled frames have the same energy, so a model
of the Boltzmann density should score them alike; a training NLL that is lower only on the frames
as simulated shows memorized frames (what `bgp4 train --augment` counters). Prints mean NLL in
nats per frame (Cartesian density).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from bgp4.generator.model import load_generator
from bgp4.simulation.atoms import rotor_hydrogens
from bgp4.simulation.data import load_trajectory, relabel_rotors

__all__ = ["main"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--data", type=Path, default=None, help="MD file [default: the run's settings]")
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    a = parser.parse_args()
    data = a.data or Path(json.loads((a.run / "settings.json").read_text())["data"])
    bg = load_generator(a.run / "model.pt").eval()
    triples = np.array(rotor_hydrogens(bg.molecule()))
    xyz = load_trajectory(data).xyz
    split = np.load(a.run / "split.npz")
    rng = np.random.default_rng(a.seed)
    print(f"run: {a.run}  data: {data}  frames per split: {a.frames}  triples: {triples.tolist()}")
    for name in ("test", "train"):
        frames = xyz[rng.choice(split[name], min(a.frames, split[name].size), replace=False)]
        row = []
        for shift in (0, 1, 2):
            moved = relabel_rotors(frames, triples, np.full((len(frames), len(triples)), shift))
            with torch.no_grad():
                nll = torch.cat([bg.nll(torch.as_tensor(c)).double() for c in np.array_split(moved, 10)])
            row.append(f"shift {shift}: {float(nll[torch.isfinite(nll)].mean()):.3f}")
        print(f"{name}: " + "  ".join(row), flush=True)


if __name__ == "__main__":
    main()
