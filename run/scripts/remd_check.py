"""Check two data sets of one target against each other: mean energy, P(phi > 0) and dF per residue.

    python run/scripts/remd_check.py FIRST.h5 SECOND.h5 [--blocks 20] [--json out.json]

Made to check replica-exchange data (FIRST: a `bgp4 simulate --replica-exchange` file, the lowest
temperature's frames) against plain MD at the same temperature (SECOND), it compares any two
`bgp4 simulate` files of the same molecule, system and temperature, for example two plain MD runs
with different seeds. For each: the mean potential energy (kJ/mol), P(phi > 0) of the molecule's
own phi and, for every residue with phi and psi, P(phi_i > 0) and dF_i = -ln(P / (1 - P)) (kT),
each with a block-average standard error (blocks within one MD replica:
`bgp4.analysis.estimators.block_standard_error`), and the MD each needed (ns: the length of the
kept trajectory, and all the MD run, every temperature and replica, equilibration included).
Then the differences FIRST - SECOND with their combined standard error and z = difference / error:
|z| below 2 is agreement within errors. A block error holds when a block (a twentieth of the data)
is much longer than the correlation time, which for P(phi > 0) at 300 K is nanoseconds of plain MD.
The JSON holds "first" and "second" (each file's figures) and the comparisons.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from bgp4.analysis._arrays import _json_float
from bgp4.analysis.estimators import (
    N_BLOCKS,
    backbone_dihedrals,
    block_standard_error,
    state_free_energy,
    state_free_energy_error,
)
from bgp4.analysis.residues import residue_dihedrals, residue_torsions
from bgp4.simulation.data import load_trajectory
from bgp4.simulation.molecule import check_same_molecule

__all__ = ["md_lengths", "phi_state", "summary", "compare", "report", "main"]


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


def phi_state(phi: np.ndarray, groups: np.ndarray | None, blocks: int) -> dict[str, float]:
    """P(phi > 0) and dF = -ln(P / (1 - P)) (kT) of one torsion series (rad), with block standard errors."""
    positive = (phi > 0).astype(np.float64)
    p, se = float(positive.mean()), block_standard_error(positive, groups, blocks)
    return {
        "p_phi_positive": p,
        "p_phi_positive_se": se,
        "dF_phi_kT": state_free_energy(p),
        "dF_phi_kT_se": state_free_energy_error(p, se),
    }


def summary(path: Path, blocks: int) -> tuple[dict[str, Any], Any]:
    """Mean energy, P(phi > 0) and dF (the molecule's own phi, and per residue) of one file, each
    with its block standard error; and its molecule."""
    data = load_trajectory(path, extras=("replica",))
    molecule = data.molecule()
    groups = data.extras.get("replica")  # plain MD: blocks within one replica; REMD: one series
    phi, _ = backbone_dihedrals(data.xyz, molecule)
    torsions = residue_torsions(molecule)
    phis, _ = residue_dihedrals(data.xyz, molecule, torsions)
    return {
        "file": str(path),
        "kind": "replica exchange" if data.settings.get("replica_exchange") else "plain MD",
        "frames": data.n_frames,
        "temperature_K": data.settings.get("temperature"),
        "ladder_K": data.settings.get("temperatures"),
        "exchange_acceptance": data.settings.get("exchange_acceptance"),
        **md_lengths(data.settings, data.n_frames),
        "energy": float(np.mean(data.energies)),  # kJ/mol
        "energy_se": block_standard_error(data.energies, groups, blocks),
        **phi_state(phi, groups, blocks),
        "residues": {r.label: phi_state(phis[:, i], groups, blocks) for i, r in enumerate(torsions)},
    }, molecule


def compare(a: dict[str, Any], b: dict[str, Any], key: str) -> dict[str, float]:
    """Difference a - b of `key`, its combined standard error and z."""
    difference = a[key] - b[key]
    error = math.hypot(a[f"{key}_se"], b[f"{key}_se"])
    return {"difference": difference, "se": error, "z": difference / error if error > 0 else math.nan}


def _verdict(c: dict[str, float]) -> str:
    if not math.isfinite(c["difference"]):
        return "not comparable: a file never (or always) has phi > 0 there"
    if not math.isfinite(c["z"]):
        return "no standard error (too few blocks, or no spread)"
    return "agree within 2 SE" if abs(c["z"]) < 2 else "DIFFER by more than 2 SE"


def _print_file(s: dict[str, Any]) -> None:
    print(
        f"{s['kind']:17s} {s['frames']:>8d} frames, {s['kept_ns']:8.4g} ns kept, "
        f"{s['total_ns']:8.4g} ns of MD in all; <E> = {s['energy']:9.3f} +- {s['energy_se']:.3f} kJ/mol, "
        f"P(phi > 0) = {s['p_phi_positive']:.4f} +- {s['p_phi_positive_se']:.4f}"
    )
    for label, r in s["residues"].items():
        dF, se = r["dF_phi_kT"], r["dF_phi_kT_se"]
        print(f"  {label:6s} P(phi > 0) = {r['p_phi_positive']:.4f}, dF = {dF:.3f} +- {se:.3f} kT")
    if s["ladder_K"]:
        rates = ", ".join("n/a" if r is None else f"{r:.2f}" for r in s["exchange_acceptance"] or [])
        ladder = ", ".join(f"{t:.1f}" for t in s["ladder_K"])
        print(f"  ladder (K): {ladder}; neighbour exchange acceptance: {rates}")


def report(first: dict[str, Any], second: dict[str, Any], blocks: int, name: str) -> dict[str, Any]:
    """The comparisons (first - second), printed; returns them with both files' figures."""
    result = {
        "first": first,
        "second": second,
        "energy": compare(first, second, "energy"),
        "p_phi_positive": compare(first, second, "p_phi_positive"),
        "residues": {
            label: {key: compare(own, second["residues"][label], key) for key in ("p_phi_positive", "dF_phi_kT")}
            for label, own in first["residues"].items()
        },
    }
    print(f"{name} at {first['temperature_K']} K; errors: block averages of {blocks} blocks")
    for s in (first, second):
        _print_file(s)
    rows = [(key, result[key]) for key in ("energy", "p_phi_positive")]
    for label, c in result["residues"].items():
        rows += [(f"{label} P", c["p_phi_positive"]), (f"{label} dF", c["dF_phi_kT"])]
    for key, c in rows:
        print(f"{key:14s} difference {c['difference']:+.4f} +- {c['se']:.4f} (z = {c['z']:+.2f}): {_verdict(c)}")
    return result


def _finite_or_null(value: Any) -> Any:
    """`value` with every non-finite float as None, so that the JSON is strict (no Infinity, NaN)."""
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_null(v) for v in value]
    return _json_float(value) if isinstance(value, float) else value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path, help="a bgp4 simulate file (a --replica-exchange file, say)")
    parser.add_argument("second", type=Path, help="a bgp4 simulate file of the same target (plain MD, say)")
    parser.add_argument("--blocks", type=int, default=N_BLOCKS, help="blocks of the block averages")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()
    first, first_molecule = summary(args.first, args.blocks)
    second, second_molecule = summary(args.second, args.blocks)
    check_same_molecule(first_molecule, second_molecule, "the two files")
    if first["temperature_K"] != second["temperature_K"]:
        raise SystemExit(f"the files are at {first['temperature_K']} K and {second['temperature_K']} K")
    result = report(first, second, args.blocks, first_molecule.name)
    if args.json:
        args.json.write_text(json.dumps(_finite_or_null(result), indent=1, allow_nan=False))


if __name__ == "__main__":
    main()
