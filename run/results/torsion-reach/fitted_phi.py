"""Where each residue's phi > 0 frames lie in the phi coordinate of trained runs' own transforms.

    python fitted_phi.py DATA.h5 RUN [RUN ...]

For every third frame of DATA: per residue, the run's z-matrix row of phi, that torsion's fitted
mean and scale (rad), and the median of the standardized coordinate y over the frames with
phi > 0 and the share of them beyond the splines' +-5 (`run/scripts/torsion_reach.py`'s
`phi_positive_placement`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from torsion_reach import phi_positive_placement  # noqa: E402

from bgp4.generator.model import load_generator  # noqa: E402
from bgp4.simulation.data import load_trajectory  # noqa: E402

data = load_trajectory(sys.argv[1])
xyz, topology = data.xyz[::3], data.molecule().topology
for run in sys.argv[2:]:
    t = load_generator(f"{run}/model.pt").transform
    with torch.no_grad():
        y, _ = t.from_cartesian(torch.as_tensor(xyz, dtype=torch.float64))
    for label, row, _, median, beyond in phi_positive_placement(t, y, xyz, topology):
        print(
            f"{run} {label}: row {row}, mean {float(t.torsion_mean[row]):+.3f}, scale "
            f"{float(t.torsion_std[row]):.3f}, phi > 0 y median {median:+.2f}, beyond +-5 {beyond:.3f}"
        )
