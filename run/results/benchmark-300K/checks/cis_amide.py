"""The alanine dipeptide's two amide torsions in MD files: the share of frames with the peptide bond
cis (|omega| < 90 degrees), on every 10th frame, and where in the file the cis frames lie.

    python cis_amide.py DATA.h5 [...]
"""

from __future__ import annotations

import sys

import mdtraj
import numpy as np

from bgp4.simulation.data import load_trajectory

# ACE CH3-C-N-CA(ALA) and CA(ALA)-C-N-CH3(NME): bgp4's alanine dipeptide atom order (names printed)
OMEGAS = {"ACE-ALA": [1, 4, 6, 8], "ALA-NME": [8, 14, 16, 18]}


def main(paths: list[str]) -> None:
    for path in paths:
        t = load_trajectory(path)
        top = t.molecule().topology
        if path == paths[0]:
            for name, atoms in OMEGAS.items():
                print(f"{name}: " + "-".join(str(top.atom(a)) for a in atoms))
        frames = np.arange(0, t.n_frames, 10)
        omega = np.degrees(mdtraj.compute_dihedrals(mdtraj.Trajectory(t.xyz[frames], top), list(OMEGAS.values())))
        parts = []
        for k, name in enumerate(OMEGAS):
            cis = np.abs(omega[:, k]) < 90.0
            where = f", frames {frames[cis].min()}-{frames[cis].max()}" if cis.any() else ""
            parts.append(f"{name} cis {cis.mean():.4f} ({cis.sum()} of {cis.size}{where})")
        print(f"{path}: " + "; ".join(parts))


if __name__ == "__main__":
    main(sys.argv[1:])
