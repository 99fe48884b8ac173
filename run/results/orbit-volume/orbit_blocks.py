"""The orbit term's dF(phi > 0) shift per residue over consecutive blocks of an MD file.

    python run/results/orbit-volume/orbit_blocks.py DATA.h5 [BLOCKS]

The same computation as `run/scripts/orbit_volume.py` (transform fitted on every frame, bonds to
hydrogen fixed), split into BLOCKS (default 8) consecutive blocks of frames by `np.array_split`; a
block holds frames of one MD replica when the replicas' frame counts are multiples of its size.
Prints each block's shift per residue (kT) and their mean with its standard error.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from orbit_volume import residue_shifts  # noqa: E402

from bgp4.analysis.residues import residue_dihedrals  # noqa: E402
from bgp4.flows.coordinates import MixedCoordinateTransform  # noqa: E402
from bgp4.simulation.data import load_trajectory  # noqa: E402

__all__ = ["main"]


def main() -> None:
    data = load_trajectory(sys.argv[1])
    blocks = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    molecule, xyz = data.molecule(), data.xyz
    t = MixedCoordinateTransform.fit(torch.as_tensor(xyz, dtype=torch.float64), molecule, fix_constrained=True)
    with torch.no_grad():
        o = t.orbit_term(xyz).numpy()
    phi, _ = residue_dihedrals(xyz, molecule)
    print(f"{len(xyz)} frames, {blocks} consecutive blocks; dF(phi > 0) shift per residue (kT)")
    rows = []
    for idx in np.array_split(np.arange(len(xyz)), blocks):
        rows.append(residue_shifts(o[idx], phi[idx]))
        print("  block", " ".join(f"{v:+.4f}" for v in rows[-1]))
    shifts = np.array(rows)
    for k, column in enumerate(shifts.T):
        v = column[np.isfinite(column)]
        print(f"residue {k + 1}: mean of blocks {v.mean():+.4f}, standard error {v.std(ddof=1) / np.sqrt(v.size):.4f}")


if __name__ == "__main__":
    main()
