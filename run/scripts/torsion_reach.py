"""How far out each narrow torsion's frames lie in the spline kinds' standardized coordinates.

    python run/scripts/torsion_reach.py DATA.h5 [--every 5] [--unwidened]

Fits the spline kinds' coordinate transform to every `--every`-th frame of a `bgp4 simulate` file
(constraints as the file's system has them: fixed for `hbonds`) and prints, per narrow torsion,
the 0.999 quantile and the maximum of |y|, largest first; then, per residue, where the frames with
phi > 0 lie on that residue's phi coordinate. The splines act on [-5, 5] and are the identity
beyond it, so frames out there get no mass from the flow. `--unwidened` shows the standardization
by the plain std (bgp4 before the torsion scale was widened, `bgp4.flows.torsions.TORSION_REACH`).
Prints `name: value` lines.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bgp4.analysis.residues import residue_dihedrals, residue_torsions  # noqa: E402
from bgp4.flows import coordinates  # noqa: E402
from bgp4.flows.splines import SPLINE_BOUND  # noqa: E402
from bgp4.generator.model import build_generator  # noqa: E402
from bgp4.simulation.data import load_trajectory  # noqa: E402


def standardized(path: str, every: int, unwidened: bool) -> tuple[Any, torch.Tensor, np.ndarray, Any]:
    """(transform, flow coordinates (n, n_dims) of the fitted frames, the frames, the topology)."""
    data = load_trajectory(path)
    molecule = data.molecule()
    xyz = data.xyz[::every]
    fix = molecule.spec.constraints != "none"
    keep = (lambda u, mean, std: std) if unwidened else coordinates._narrow_scale
    with mock.patch.object(coordinates, "_narrow_scale", keep):
        bg = build_generator("spline", xyz, molecule, blocks=1, hidden=8, fix_constrained=fix)
    with torch.no_grad():
        y, _ = bg.transform.from_cartesian(torch.as_tensor(xyz, dtype=torch.float64))
    return bg.transform, y.double(), xyz, molecule.topology  # an mdtraj Topology


def phi_positive_placement(transform, y: torch.Tensor, xyz: np.ndarray, topology) -> list[tuple]:
    """Per residue whose phi is a z-matrix torsion and has frames with phi > 0: (label, z-matrix row,
    P(phi > 0), the median of those frames' standardized phi coordinate y, their share beyond
    +-SPLINE_BOUND). y: (n, n_dims) flow coordinates of the frames xyz (n, n_atoms, 3) nm."""
    rows = {frozenset(r): i for i, r in enumerate(transform.z_matrix)}
    residues = residue_torsions(topology)
    phi = residue_dihedrals(xyz, topology, residues)[0]
    placed = []
    for residue, values in zip(residues, phi.T):
        row, positive = rows.get(frozenset(residue.phi)), values > 0
        if row is None or not positive.any():
            continue
        on = y[positive, transform.n_free_bonds + transform.n_ic + row]
        beyond = (on.abs() > SPLINE_BOUND).double().mean().item()
        placed.append((residue.label, row, float(positive.mean()), on.median().item(), beyond))
    return placed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("--every", type=int, default=5, help="fit to every n-th frame")
    parser.add_argument("--unwidened", action="store_true", help="standardize by the plain std")
    args = parser.parse_args()
    t, y, xyz, top = standardized(args.data, args.every, args.unwidened)
    start = t.n_free_bonds + t.n_ic
    names = [f"{a.residue}-{a.name}" for a in top.atoms]
    tor = y[:, start : start + t.n_ic]
    q = torch.as_tensor(np.quantile(tor.abs().numpy(), 0.999, axis=0))  # torch.quantile refuses large inputs
    for row in torch.argsort(-q)[:8].tolist():
        if not bool(t.torsion_circular[row]):
            label = " ".join(names[i] for i in t.z_matrix[row])
            print(f"torsion {label}: q999 {q[row]:.2f}, max {tor[:, row].abs().max():.2f}")
    for label, _, p, median, out in phi_positive_placement(t, y, xyz, top):
        print(f"phi > 0 {label}: P {p:.4f}, y median {median:+.2f}, beyond +-5 {out:.3f}")


if __name__ == "__main__":
    main()
