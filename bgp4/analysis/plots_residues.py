"""The per-residue Ramachandran figure: a row of (phi, psi) density panels for every residue.

Same conventions as `bgp4.analysis.plots` (whose style, colour scale and panel it uses): plain
arrays in, `<stem>.png` and `<stem>.pdf` out, angles in radians.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from bgp4.analysis import plots
from bgp4.analysis.estimators import N_BINS, ramachandran_histogram
from bgp4.errors import InputError

__all__ = ["residue_ramachandran"]

#: Datasets of one residue: label -> (phi (n,), psi (n,), linear non-negative weights (n,) or None).
Panels = Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]]


@plots._styled
def residue_ramachandran(residues: Mapping[str, Panels], path: str | Path, bins: int = N_BINS) -> list[Path]:
    """Joint (phi_i, psi_i) densities of every residue i: one row per residue, one panel per
    dataset (MD first, then each model), all on one logarithmic colour scale.

    Args:
        residues: residue label (e.g. "ALA2") -> its datasets, in display order.
        path: output stem; writes `<stem>.png` and `<stem>.pdf`.
        bins: histogram bins per axis on [-pi, pi].
    """
    if not residues or not all(residues.values()):
        raise InputError("residue_ramachandran needs at least one residue with at least one dataset")
    densities = {
        (residue, label): ramachandran_histogram(phi, psi, bins, weights=w)
        for residue, panels in residues.items()
        for label, (phi, psi, w) in panels.items()
    }
    norm = plots._density_norm(densities.values())
    ncols = max(len(panels) for panels in residues.values())
    fig, axes = plots._new_figure(len(residues) * ncols, panel_size=(2.4, 2.4), ncols=ncols)
    shown = []
    for row, (residue, panels) in enumerate(residues.items()):
        for col in range(ncols):
            ax = axes[row * ncols + col]
            if col >= len(panels):  # a residue with fewer datasets than the widest row
                ax.set_visible(False)
                continue
            label, (phi, _psi, _w) = list(panels.items())[col]
            n = np.asarray(phi).size
            plots._density_panel(ax, densities[residue, label], norm, f"{residue}: {label}", n)
            shown.append(ax)
    plots._density_colorbar(fig, shown, norm)
    fig.suptitle(f"backbone torsions of {len(residues)} residue{'s' if len(residues) != 1 else ''}")
    return plots._save(fig, path)
