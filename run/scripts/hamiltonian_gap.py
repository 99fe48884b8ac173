"""How far apart two force fields are on one data file's frames.

    python run/scripts/hamiltonian_gap.py DATA.h5 --forcefield amber96 [--frames 2000] [--seed 0]

Evaluates every chosen frame of DATA (a `bgp4 simulate` file) under the system its record names
(A) and under the same molecule, solvent and constraints with another force field (B), at the
file's temperature, and prints the difference du = u_B - u_A in kT: its mean (a constant offset
changes no Boltzmann distribution), its standard deviation beyond that mean, and the ESS fraction
that reweighting A's frames to B would keep (Kish, with log w = -du). Why: the published 300 K
table's alanine dipeptide is Amber ff96 with OBC1 (`--forcefield amber96`), bgp4's default is
amber99sb-ildn with OBC2; a spread of several kT means the two are different targets, and figures
on one are not figures on the other (run/results/benchmark-300K, "Differences of setup").
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from bgp4.analysis.weights import reverse_ess
from bgp4.simulation.data import load_trajectory, resolve_temperature
from bgp4.simulation.energy import OpenMMEnergy
from bgp4.simulation.molecule import molecule_of

__all__ = ["gap", "main"]


def gap(data: Path, forcefield: str, frames: int = 2000, seed: int = 0) -> dict[str, float]:
    """{temperature (K), frames, mean and std of u_B - u_A (kT), reweighting ESS fraction}."""
    trajectory = load_trajectory(data)
    a = trajectory.molecule()
    b = molecule_of({**a.record(), "forcefield": forcefield})
    chosen = np.sort(np.random.default_rng(seed).choice(trajectory.n_frames, min(frames, trajectory.n_frames), False))
    x = torch.as_tensor(trajectory.xyz[chosen], dtype=torch.float64)
    temperature = resolve_temperature(trajectory.settings.get("temperature"), None, data)
    u = []
    for system in (a.system, b.system):
        with OpenMMEnergy(system, temperature=temperature, n_workers=1) as energy:
            u.append(energy.reduced_energy(x).numpy())
    du = u[1] - u[0]
    return {
        "temperature": float(temperature),
        "frames": len(chosen),
        "mean_kT": float(du.mean()),
        "std_kT": float(du.std()),
        "reweighting_ess": float(reverse_ess(-du)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path)
    parser.add_argument("--forcefield", required=True, help="force field B (bgp4 simulate --forcefield)")
    parser.add_argument("--frames", type=int, default=2000, help="frames drawn at random (seeded)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    g = gap(args.data, args.forcefield, args.frames, args.seed)
    print(
        f"{args.data.name}: {g['frames']} frames at {g['temperature']:g} K; u_{args.forcefield} - u_file: "
        f"mean {g['mean_kT']:.2f} kT, std {g['std_kT']:.2f} kT beyond it; reweighting ESS {g['reweighting_ess']:.4f}"
    )


if __name__ == "__main__":
    main()
