"""The layout of a mixed coordinate transform and the fit of its rigid block.

`bgp4.flows.coordinates.MixedCoordinateTransform` builds its index buffers from a `ZMatrixLayout`
(z-matrix, rigid block, fixed bonds, placement order: the checks of its constructor arguments), takes
a molecule's layout from `molecule_layout`, and fits its rigid block with `rigid_reference` (nm) and
`rigid_pca`, both in `fit_rigid_block` (float64 tensors throughout).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from bgp4.errors import InputError
from bgp4.flows.geometry import kabsch
from bgp4.simulation.atoms import constrained_bonds, constraint_free_layout
from bgp4.simulation.molecule import Molecule

__all__ = ["ZMatrixLayout", "fit_rigid_block", "molecule_layout", "rigid_pca", "rigid_reference"]


@dataclass(frozen=True)
class ZMatrixLayout:
    """Which atoms are placed from internal coordinates, from which references, and in what order.

    Attributes:
        z_matrix: (n_ic, 4) int64 rows [atom, bond, angle, torsion partner] in placement order.
        rigid_block: (n_rb,) int64 atoms kept Cartesian.
        fixed: sorted z-matrix rows whose bond is fixed (not a flow coordinate).
        n_rigid_dims: PCA directions of the rigid block that are flow coordinates.
        levels: z-matrix rows in groups whose reference atoms are all placed by earlier groups.
    """

    z_matrix: np.ndarray
    rigid_block: np.ndarray
    fixed: list[int]
    n_rigid_dims: int
    levels: list[list[int]]

    @classmethod
    def checked(
        cls,
        z_matrix: Sequence[Sequence[int]] | np.ndarray,
        rigid_block: Sequence[int] | np.ndarray,
        n_atoms: int,
        fixed_rows: Sequence[int] = (),
        n_rigid_dims: Optional[int] = None,
    ) -> ZMatrixLayout:
        """The layout of these constructor arguments; InputError names the first one that does not fit."""
        zm = np.asarray(z_matrix, dtype=np.int64).reshape(-1, 4)
        rb = np.asarray(rigid_block, dtype=np.int64).ravel()
        n_ic, n_rb = len(zm), len(rb)
        if sorted(zm[:, 0].tolist() + rb.tolist()) != list(range(n_atoms)):
            raise InputError("z-matrix atoms and rigid block must cover every atom exactly once")
        fixed = sorted({int(i) for i in fixed_rows})
        if any(not 0 <= i < n_ic for i in fixed):
            raise InputError(f"fixed_rows must index z-matrix rows 0..{n_ic - 1}, got {fixed}")
        k = 3 * n_rb - 6 if n_rigid_dims is None else int(n_rigid_dims)
        if not 1 <= k <= 3 * n_rb:
            raise InputError(f"n_rigid_dims must be in 1..{3 * n_rb}, got {k}")
        return cls(zm, rb, fixed, k, _placement_levels(zm, rb))

    @property
    def n_ic(self) -> int:
        """Atoms placed from internal coordinates (z-matrix rows)."""
        return len(self.z_matrix)

    @property
    def free(self) -> list[int]:
        """Z-matrix rows whose bond is a flow coordinate."""
        return [i for i in range(self.n_ic) if i not in self.fixed]

    @property
    def n_dims(self) -> int:
        """Flow coordinates: free bonds, an angle and a torsion per row, the rigid block's PCA directions."""
        return len(self.free) + 2 * self.n_ic + self.n_rigid_dims

    def bond_gather(self) -> list[int]:
        """Column of [free bonds | fixed bonds] that holds each z-matrix row's bond."""
        free, fixed = self.free, self.fixed
        return [free.index(i) if i in free else len(free) + fixed.index(i) for i in range(self.n_ic)]


def _placement_levels(zm: np.ndarray, rigid_block: np.ndarray) -> list[list[int]]:
    """Z-matrix rows grouped so that each group's references exist once the earlier groups are placed."""
    placed, remaining, levels = set(rigid_block.tolist()), list(range(len(zm))), []
    while remaining:
        level = [i for i in remaining if set(zm[i, 1:].tolist()) <= placed]
        if not level:
            raise InputError("z-matrix references atoms that are never placed")
        placed |= {int(zm[i, 0]) for i in level}
        remaining = [i for i in remaining if i not in level]
        levels.append(level)
    return levels


def molecule_layout(
    molecule: Molecule, fix_constrained: bool
) -> tuple[list[list[int]], list[int], list[int], dict[tuple[int, int], float]]:
    """`molecule`'s z-matrix, rigid block and fixed rows, and the lengths (nm) of its constrained bonds.

    With `fix_constrained` the layout is `constraint_free_layout`'s and every constrained bond is a
    fixed row; else the molecule's own layout, nothing fixed and no lengths.
    """
    lengths = constrained_bonds(molecule) if fix_constrained else {}
    if fix_constrained:
        zm, block = constraint_free_layout(molecule)
    else:
        zm, block = molecule.z_matrix, molecule.rigid_block
    zm = np.asarray(zm).tolist()
    fixed = [i for i, row in enumerate(zm) if (min(row[:2]), max(row[:2])) in lengths]
    return zm, block, fixed, lengths


def rigid_reference(block: torch.Tensor, iterations: int = 3) -> torch.Tensor:
    """Centred reference (n_rb, 3) of rigid blocks (B, n_rb, 3): their mean after superposition, iterated."""
    ref = block[0] - block[0].mean(0)
    for _ in range(iterations):
        c, rt = kabsch(block, ref)
        ref = ((block - c) @ rt).mean(0)
        ref = ref - ref.mean(0)
    return ref


def rigid_pca(flat: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """PCA of superposed blocks (B, 3 n_rb): mean, all eigenvalues (descending), the first `k` vectors
    (sign fixed: largest entry positive) and their standard deviations."""
    mean = flat.mean(0)
    evals, evecs = torch.linalg.eigh(torch.cov((flat - mean).T))
    evals, evecs = evals.flip(0), evecs.flip(1)  # descending variance
    evecs = evecs * torch.sign(evecs[evecs.abs().argmax(0), torch.arange(evecs.shape[1])])  # fixed signs
    if evals[k - 1] <= 1e-14:
        raise InputError("rigid block of the training frames does not move in enough directions for the PCA")
    return mean, evals, evecs[:, :k], evals[:k].sqrt()


def fit_rigid_block(
    block: torch.Tensor, n_rigid_dims: int, max_rmsd: float, iterations: int = 3
) -> tuple[torch.Tensor, ...]:
    """Fit of training blocks (B, n_rb, 3) nm: reference (their mean after superposition, iterated),
    PCA of the superposed blocks (mean, eigenvalues, the first `n_rigid_dims` vectors, their
    standard deviations) and the largest RMSD (nm) to the reference; InputError above `max_rmsd`."""
    ref = rigid_reference(block, iterations)
    c, rt = kabsch(block, ref)
    aligned = (block - c) @ rt
    rmsd = (aligned - ref).square().sum(-1).mean(-1).sqrt().max()
    if rmsd > max_rmsd:
        raise InputError(
            f"rigid block of a training frame is {rmsd:.3f} nm RMSD from the reference "
            f"after superposition (limit {max_rmsd} nm): frames are not of this molecule"
        )
    return (ref, *rigid_pca(aligned.reshape(len(aligned), -1), n_rigid_dims), rmsd)
