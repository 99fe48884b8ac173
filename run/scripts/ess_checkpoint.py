"""Reverse ESS of a run's latest checkpoint against the finished model it started from, on the same draws.

    python run/scripts/ess_checkpoint.py INIT_RUN RUN [--n 20000] [--seed 123]

RUN is a `bgp4 train --init INIT_RUN` run, finished or not: its checkpoint's weights are loaded
into INIT_RUN's generator (same architecture), and both generators draw N samples from the same
latent seed, so the difference in ESS is the training's, not the draws'. Energies from the OpenMM
bridge at the run's temperature (kT); prints ESS with its bootstrap 95 % interval for each.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from bgp4.analysis.weights import log_weights, reverse_ess, reverse_ess_interval
from bgp4.generator.model import load_generator
from bgp4.simulation.energy import OpenMMEnergy

__all__ = ["ess_of", "main"]

CHUNK = 5_000


def ess_of(bg, energy: OpenMMEnergy, n: int, seed: int) -> tuple[float, tuple[float, float]]:
    gen = torch.Generator().manual_seed(seed)
    u, log_q = [], []
    with torch.no_grad():
        for start in range(0, n, CHUNK):
            x, lq, ok, _ = bg.sample(min(CHUNK, n - start), generator=gen)
            u.append(np.where(ok.numpy(), energy.reduced_energy(x).numpy(), np.inf))  # out of domain: weight 0
            log_q.append(lq.double().numpy())
    log_w = log_weights(np.concatenate(u), np.concatenate(log_q))
    return reverse_ess(log_w), reverse_ess_interval(log_w)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("init_run", type=Path)
    parser.add_argument("run", type=Path)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=123)
    a = parser.parse_args()
    temperature = json.loads((a.init_run / "complete.json").read_text())["temperature"]
    bg = load_generator(a.init_run / "model.pt")
    energy = OpenMMEnergy(bg.molecule().system, temperature, n_workers=1)
    try:
        ess, (lo, hi) = ess_of(bg, energy, a.n, a.seed)
        print(f"{a.init_run}: ESS {ess:.3f} [{lo:.3f}, {hi:.3f}]")
        state = torch.load(a.run / "checkpoint.pt", map_location="cpu", weights_only=False)
        bg.load_state_dict(state["model"])
        ess, (lo, hi) = ess_of(bg, energy, a.n, a.seed)
        print(f"{a.run} (checkpoint at step {state['step']}): ESS {ess:.3f} [{lo:.3f}, {hi:.3f}]")
    finally:
        energy.close()


if __name__ == "__main__":
    main()
