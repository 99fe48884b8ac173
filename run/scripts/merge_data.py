"""Merge bgp4 data files of one molecule, system and temperature into one training file.

    python run/scripts/merge_data.py OUT.h5 A.h5 B.h5 [...]

Used to ask whether more frames lift a generator trained by maximum likelihood, e.g. the 300 K
replica-exchange data of alanine dipeptide plus plain 300 K MD of it (run/results/benchmark-300K).
Frames are concatenated in the order given; the merged file is a plain bgp4 data file whose
settings are the first file's, with `merged_from` (each input's path, frames, method and MD energy
evaluations) added and the per-frame MD cost keys removed (`save_every`, `temperatures`, ...): one
frame of a merged file has no single cost in energy evaluations, so `bgp4 analyze` reports none
for the frames a run drew rather than a wrong one, and the whole file's MD as the sum of its sources'.

A merged file is not an equilibrium sample where its inputs sample different distributions (plain
MD that has not crossed a barrier weights that basin low): train on it, and analyze against an
equilibrium file (`bgp4 analyze RUN --data REMD.h5`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from bgp4.report.costs import md_energy_evaluations
from bgp4.simulation.data import load_trajectory, write_trajectory
from bgp4.simulation.molecule import check_same_molecule

__all__ = ["merged_settings", "main"]

#: Settings that describe how one input's frames were made; they do not hold for the merged file.
PER_SOURCE_KEYS = (
    "save_every",
    "frames",
    "iterations",
    "temperatures",
    "replica_exchange",
    "replicas",
    "replica_seeds",
    "exchange_acceptance",
    "exchange_attempts",
    "steps_per_iteration",
    "seed",
)


def merged_settings(settings: list[dict], paths: list[Path], frames: list[int]) -> dict:
    """The first input's settings without its per-source keys, plus `merged_from` and the total
    `frames`; raises SystemExit if the inputs disagree on the temperature (K)."""
    temperatures = {float(s["temperature"]) for s in settings}
    if len(temperatures) != 1:
        raise SystemExit(f"the inputs are at different temperatures: {sorted(temperatures)} K")
    out = {k: v for k, v in settings[0].items() if k not in PER_SOURCE_KEYS}
    out["method"] = "merged"
    out["frames"] = int(sum(frames))
    out["merged_from"] = [
        {
            "path": str(p),
            "frames": int(n),
            "method": s.get("method", "md"),
            "ladder": s.get("replica_exchange", ""),
            "md_energy_evaluations": md_energy_evaluations(s, n),
        }
        for p, n, s in zip(paths, frames, settings, strict=True)
    ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("inputs", type=Path, nargs="+")
    args = parser.parse_args()
    if args.out.exists():
        raise SystemExit(f"{args.out} exists; choose another name")
    data = [load_trajectory(p) for p in args.inputs]
    for other in data[1:]:
        check_same_molecule(data[0].molecule(), other.molecule(), f"{data[0].source} and {other.source}")
    settings = merged_settings([d.settings for d in data], args.inputs, [d.n_frames for d in data])
    chunks = ({"coordinates": d.xyz, "potentialEnergy": d.energies.astype(np.float32)} for d in data)
    write_trajectory(args.out, data[0].topology, chunks, settings)
    print(f"{args.out}: {settings['frames']} frames from {len(data)} files")


if __name__ == "__main__":
    main()
