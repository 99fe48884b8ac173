"""P(phi > 0) of finished run/scripts/metad_phi.py walks read a third way: the walk's own frames
(phi, psi every ps) from its last half, each weighted by exp(V(phi, psi) / kT) with V the final
bias (kJ/mol, bilinear on OpenMM's periodic grid). This treats the bias as static over those frames
(it still grows slowly there), so it reads the frames, not the bias's shape; the error is that of
10 contiguous blocks of the weighted frames.

    python metad_reweight.py WORK [...]      # metad_phi.py --out folders
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from metad_rescore import walk_bias
from scipy.interpolate import RegularGridInterpolator

from bgp4.simulation.molecule import kT

N_BLOCKS = 10


def reweighted(work: Path, first: float = 0.5) -> tuple[float, float, int]:
    """P(phi > 0), its block error and the frames used, from the frames after `first` of the walk."""
    record, bias = walk_bias(work)  # (n_psi, n_phi), kJ/mol
    axis = np.linspace(-np.pi, np.pi, bias.shape[0])  # the last point repeats the first
    at = RegularGridInterpolator((axis, axis), bias)
    chunks = sorted(work.glob("cv-*.npz"))
    cv = np.concatenate([np.load(f)["phi_psi"] for f in chunks[int(first * len(chunks)) :]])
    phi, psi = (np.mod(cv[:, i] + np.pi, 2 * np.pi) - np.pi for i in (0, 1))
    v = at(np.column_stack([psi, phi])) / kT(record["data"]["temperature"])
    w = np.exp(v - v.max())
    blocks = [(w[b] * (phi[b] > 0)).sum() / w[b].sum() for b in np.array_split(np.arange(w.size), N_BLOCKS)]
    return float((w * (phi > 0)).sum() / w.sum()), float(np.std(blocks, ddof=1) / np.sqrt(N_BLOCKS)), w.size


def main(works: list[Path]) -> None:
    values = []
    for work in works:
        p, err, n = reweighted(work)
        values.append(p)
        print(f"{work}: {n} frames of the last half, P(phi > 0) reweighted by the final bias {p:.5f} +- {err:.5f}")
    print(f"mean of {len(values)}: {np.mean(values):.5f}")


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]])
