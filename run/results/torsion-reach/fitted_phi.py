"""Where each residue's phi > 0 frames lie in the phi coordinate of trained runs' own transforms.

    python fitted_phi.py DATA.h5 RUN [RUN ...]

For every third frame of DATA: per residue, the run's z-matrix row of phi, that torsion's fitted
mean and scale (rad), and the median of the standardized coordinate y over the frames with
phi > 0 and the share of them beyond the splines' +-5.
"""

from __future__ import annotations

import sys

import mdtraj
import torch

from bgp4.generator.model import load_generator
from bgp4.simulation.data import load_trajectory

data = load_trajectory(sys.argv[1])
xyz = data.xyz[::3]
quads, phi = mdtraj.compute_phi(mdtraj.Trajectory(xyz, data.molecule().topology))
for run in sys.argv[2:]:
    t = load_generator(f"{run}/model.pt").transform
    rows = {frozenset(r): i for i, r in enumerate(t.z_matrix)}
    with torch.no_grad():
        y, _ = t.from_cartesian(torch.as_tensor(xyz, dtype=torch.float64))
    for quad, values in zip(quads, phi.T):
        row, positive = rows[frozenset(quad.tolist())], values > 0
        on = y[positive, t.n_free_bonds + t.n_ic + row]
        print(
            f"{run} {data.molecule().topology.atom(int(quad[2])).residue}: row {row}, mean "
            f"{float(t.torsion_mean[row]):+.3f}, scale {float(t.torsion_std[row]):.3f}, phi > 0 y median "
            f"{float(on.median()):+.2f}, beyond +-5 {float((on.abs() > 5).double().mean()):.3f}"
        )
