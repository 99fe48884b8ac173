"""Check replica-exchange data against plain MD at the same temperature: mean energy and P(phi > 0).

    python run/scripts/remd_check.py REMD.h5 MD.h5 [--blocks 20] [--json out.json]

REMD.h5 is a `bgp4 simulate --replica-exchange` file (the lowest temperature's frames), MD.h5 a
plain `bgp4 simulate` file of the same molecule, system and temperature. For each: the mean
potential energy (kJ/mol) and P(phi > 0) with block-average standard errors (blocks within one MD
replica: `bgp4.analysis.estimators.block_standard_error`), and the MD each needed (ns: the length
of the kept trajectory, and all the MD run, every temperature and replica, equilibration
included). Then the differences with their combined standard error and z = difference / error:
|z| below 2 is agreement within errors. A block error holds when a block (a twentieth of the data)
is much longer than the correlation time, which for P(phi > 0) at 300 K is nanoseconds of plain MD.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from bgp4.analysis.estimators import N_BLOCKS, backbone_dihedrals, block_standard_error
from bgp4.simulation.data import load_trajectory
from bgp4.simulation.molecule import check_same_molecule


def md_lengths(settings: dict[str, Any], n_frames: int) -> dict[str, float]:
    """ns of MD behind a data file: its kept trajectory, and all of it (every temperature of a
    replica exchange, every replica's equilibration)."""
    step_ns = float(settings["timestep_fs"]) * 1e-6
    kept = n_frames * int(settings["save_every"]) * step_ns
    if settings.get("replica_exchange"):
        walkers = len(settings["temperatures"])
        # equilibration: whole iterations of every walker (bgp4.simulation.remd)
        equilibration = round(float(settings["equilibration_ps"]) * 1e-3 / step_ns / int(settings["save_every"]))
        total = walkers * (n_frames + equilibration) * int(settings["save_every"]) * step_ns
    else:
        total = kept + int(settings["replicas"]) * float(settings["equilibration_ps"]) * 1e-3
    return {"kept_ns": kept, "total_ns": total}


def summary(path: Path, blocks: int) -> tuple[dict[str, Any], Any]:
    """Mean energy and P(phi > 0) of one file, each with its block standard error; and its molecule."""
    data = load_trajectory(path, extras=("replica",))
    molecule = data.molecule()
    groups = data.extras.get("replica")  # plain MD: blocks within one replica; REMD: one series
    phi, _ = backbone_dihedrals(data.xyz, molecule)
    positive = (phi > 0).astype(np.float64)
    return {
        "file": str(path),
        "frames": data.n_frames,
        "temperature_K": data.settings.get("temperature"),
        "ladder_K": data.settings.get("temperatures"),
        "exchange_acceptance": data.settings.get("exchange_acceptance"),
        **md_lengths(data.settings, data.n_frames),
        "energy": float(np.mean(data.energies)),  # kJ/mol
        "energy_se": block_standard_error(data.energies, groups, blocks),
        "p_phi_positive": float(positive.mean()),
        "p_phi_positive_se": block_standard_error(positive, groups, blocks),
    }, molecule


def compare(a: dict[str, Any], b: dict[str, Any], key: str) -> dict[str, float]:
    """Difference a - b of `key`, its combined standard error and z."""
    difference = a[key] - b[key]
    error = math.hypot(a[f"{key}_se"], b[f"{key}_se"])
    return {"difference": difference, "se": error, "z": difference / error if error > 0 else math.nan}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("remd", type=Path, help="bgp4 simulate --replica-exchange file")
    parser.add_argument("md", type=Path, help="plain bgp4 simulate file at the same temperature")
    parser.add_argument("--blocks", type=int, default=N_BLOCKS, help="blocks of the block averages")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()
    remd, remd_molecule = summary(args.remd, args.blocks)
    md, md_molecule = summary(args.md, args.blocks)
    check_same_molecule(remd_molecule, md_molecule, "the two files")
    if remd["temperature_K"] != md["temperature_K"]:
        raise SystemExit(f"the files are at {remd['temperature_K']} K and {md['temperature_K']} K")
    result = {
        "remd": remd,
        "md": md,
        "energy": compare(remd, md, "energy"),
        "p_phi_positive": compare(remd, md, "p_phi_positive"),
    }
    print(f"{remd_molecule.name} at {remd['temperature_K']} K; errors: block averages of {args.blocks} blocks")
    for name, s in (("replica exchange", remd), ("plain MD", md)):
        print(
            f"{name:17s} {s['frames']:>8d} frames, {s['kept_ns']:8.4g} ns kept, {s['total_ns']:8.4g} ns of MD in all; "
            f"<E> = {s['energy']:9.3f} +- {s['energy_se']:.3f} kJ/mol, "
            f"P(phi > 0) = {s['p_phi_positive']:.4f} +- {s['p_phi_positive_se']:.4f}"
        )
    if remd["ladder_K"]:
        rates = ", ".join("n/a" if r is None else f"{r:.2f}" for r in remd["exchange_acceptance"] or [])
        print(f"ladder (K): {', '.join(f'{t:.1f}' for t in remd['ladder_K'])}; neighbour exchange acceptance: {rates}")
    for key in ("energy", "p_phi_positive"):
        c = result[key]
        if not math.isfinite(c["z"]):
            verdict = "no standard error (too few blocks, or no spread)"
        else:
            verdict = "agree within 2 SE" if abs(c["z"]) < 2 else "DIFFER by more than 2 SE"
        print(f"{key:14s} difference {c['difference']:+.4f} +- {c['se']:.4f} (z = {c['z']:+.2f}): {verdict}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
