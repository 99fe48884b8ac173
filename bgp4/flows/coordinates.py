"""Mixed coordinate transform (Noe et al. 2019): Cartesian positions <-> flow coordinates.

Atoms of the z-matrix are described by normalized bonds, angles and torsions; the rigid block
stays Cartesian, superposed onto a reference by a float64 Kabsch fit and PCA-whitened, keeping
3 * len(rigid_block) - 6 directions (the 6 dropped ones are exactly global translation and
rotation: after a Kabsch fit the block obeys 6 linear constraints, sum_i y_i = 0 and
sum_i y_i x ref_i = 0, so no internal motion is lost).

Flow coordinates, (batch, n_dims), in this order: free bonds, angles, torsions, rigid-block PCA.
    bond  r   = bond_mean + bond_std * y            (nm)
    angle a   = angle_mean + angle_std * y          (rad, domain (0, pi))
    torsion, torsions="logit" (the paper's kinds):
              t = cut + 2 pi sigmoid(torsion_mean + torsion_std * y)
                                                    (rad, in (cut, cut + 2 pi): the branch cut sits
                in the least populated histogram bin of the training data, and the logit makes
                every real y a valid torsion, so no flow sample can cross the cut)
    torsion, torsions="circular" (the spline kinds):
              t = cut + pi + y                      for torsions that go around the circle (every
                5-degree bin of the data populated): y is an angle in [-pi, pi) with the seam at the
                sparsest bin, for circular splines (`circular_mask`); no cut, no vanishing density
              t = cut + pi + torsion_mean + torsion_std * y   for narrow torsions (standardized, the
                scale widened to keep rare basins inside the splines' domain, `TORSION_REACH`;
                in the domain while |torsion_mean + torsion_std * y| < pi)
With `fix_constrained` every constrained bond of the system is fixed at its constraint length: the
rigid block and z-matrix come from `bgp4.simulation.atoms.constraint_free_layout`, so no constrained pair
is left as a flow dimension (48 dims for alanine dipeptide instead of 60).

Directions follow the generator (z -> x): `forward` / `to_cartesian` map flow coordinates to
positions, `inverse` / `from_cartesian` map positions to flow coordinates. log|det J| of the
n_dims -> 3 n_atoms map is sum over placed atoms of log(r^2 sin a) + sum log(std) (normalizations
and PCA whitening), which is log sqrt(det J^T J) of the embedding, plus the log volume of the rigid
block's rotation orbit (`orbit_log_volume`, zero at the reference), which varies with the block's
shape: so log|det J| is that of the square map (flow coordinates, rotation, translation) ->
positions up to a constant (tests check both by autograd), and exp(-u) / q are exact importance
weights (with all 3 n_rb - 6 block directions kept, the default). With fixed bonds it is the
density w.r.t. the Cartesian volume with the fixed bonds' delta functions integrated out in
bond-length coordinates.

Internally everything is computed in float64; outputs come back in the input's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional

import numpy as np
import torch
from torch import nn

from bgp4.errors import InputError
from bgp4.flows._layout import ZMatrixLayout, fit_rigid_block, molecule_layout
from bgp4.flows.geometry import (
    bond_angle,
    dihedral,
    frames_view,
    kabsch,
    on_kabsch_maximum,
    orbit_log_volume,
    place_atom,
)
from bgp4.flows.torsions import (
    TORSION_MODES,
    TWO_PI,
    _goes_around,
    _narrow_scale,
    _sparsest_cut,
    _torsion_from_logit,
    _torsion_logit,
)

if TYPE_CHECKING:
    from bgp4.simulation.molecule import Molecule

__all__ = ["LOG_Q", "MixedCoordinateTransform"]

_F64 = torch.float64
#: What log q is a density of, as samples files record it (files of earlier versions lack the orbit volume).
LOG_Q = "positions, rigid-block orbit volume included"
_RIGID_FITTED = ("rigid_ref", "rigid_mean", "pca_eigenvalues", "pca_vectors", "pca_std", "fit_max_rmsd")


class MixedCoordinateTransform(nn.Module):
    """Bijection between flow coordinates (batch, n_dims) and positions (batch, n_atoms, 3) nm.

    Build with `MixedCoordinateTransform.fit(frames, molecule)`; the plain constructor makes an
    unfitted shell with the same buffers, for `load_state_dict`. Args of the shell:
        z_matrix: (n_ic, 4) rows [atom, bond, angle, torsion partner] in placement order.
        rigid_block: atoms kept Cartesian.  n_atoms: atoms in the molecule.
        fixed_rows: z-matrix rows whose bond is fixed (not a flow coordinate).
        n_rigid_dims: PCA directions kept (default 3 * len(rigid_block) - 6).
        torsions: "logit" or "circular", the torsion representation (module docstring).
    """

    def __init__(
        self,
        z_matrix: Sequence[Sequence[int]] | np.ndarray,
        rigid_block: Sequence[int] | np.ndarray,
        n_atoms: int,
        fixed_rows: Sequence[int] = (),
        n_rigid_dims: Optional[int] = None,
        torsions: str = "logit",
    ):
        super().__init__()
        if torsions not in TORSION_MODES:
            raise InputError(f"torsions must be one of {TORSION_MODES}, got {torsions!r}")
        self.torsions = torsions
        layout = ZMatrixLayout.checked(z_matrix, rigid_block, n_atoms, fixed_rows, n_rigid_dims)
        self.z_matrix, self.rigid_block = layout.z_matrix.tolist(), layout.rigid_block.tolist()
        self.n_atoms = int(n_atoms)
        self.fixed_rows, self.n_rigid_dims, self.n_ic = layout.fixed, layout.n_rigid_dims, layout.n_ic
        self.n_free_bonds = len(layout.free)
        self.n_dims = layout.n_dims
        self._register_fitted(layout)
        self._register_indices(layout)

    def _register_fitted(self, layout: ZMatrixLayout) -> None:
        """Zero buffers for what `fit` sets (float64; saved in the state dict)."""
        n_free, n_ic, n_rb, k = len(layout.free), layout.n_ic, len(layout.rigid_block), layout.n_rigid_dims
        shapes = dict(
            bond_mean=(n_free,),
            bond_std=(n_free,),
            fixed_bond_length=(len(layout.fixed),),
            angle_mean=(n_ic,),
            angle_std=(n_ic,),
            torsion_mean=(n_ic,),
            torsion_std=(n_ic,),
            torsion_cut=(n_ic,),
            rigid_ref=(n_rb, 3),
            rigid_mean=(3 * n_rb,),
            pca_vectors=(3 * n_rb, k),
            pca_std=(k,),
            pca_eigenvalues=(3 * n_rb,),
            fit_max_rmsd=(),
        )
        for name, shape in shapes.items():
            self.register_buffer(name, torch.zeros(shape, dtype=_F64))
        self.register_buffer("torsion_circular", torch.zeros(n_ic, dtype=torch.bool))

    def _register_indices(self, layout: ZMatrixLayout) -> None:
        """Index buffers of the layout (not saved: the structure rebuilds them) and the placement levels."""

        def idx(name: str, values) -> None:
            self.register_buffer(name, torch.as_tensor(np.asarray(values, dtype=np.int64)), persistent=False)

        idx("_ic_cols", layout.z_matrix.T)  # (4, n_ic): atom, bond, angle, torsion partner
        idx("_rigid_idx", layout.rigid_block)
        idx("_free_rows", layout.free)
        idx("_bond_gather", layout.bond_gather())
        self._levels = []  # names of the buffers of rows placed together
        for level in layout.levels:
            idx(f"_level{len(self._levels)}", level)
            self._levels.append(f"_level{len(self._levels)}")

    def _apply(self, fn, recurse: bool = True):
        """Module.to / .float() / .cuda(): move buffers, but keep fitted values in float64."""

        def keep_dtype(t: torch.Tensor) -> torch.Tensor:
            out = fn(t)
            return out if out.dtype == t.dtype else t.to(device=out.device)

        return super()._apply(keep_dtype, recurse)

    # ------------------------------------------------------------------ structure and fitting
    def structure(self) -> dict:
        """Constructor arguments of an equivalent shell (JSON-friendly)."""
        return {
            "z_matrix": self.z_matrix,
            "rigid_block": self.rigid_block,
            "n_atoms": self.n_atoms,
            "fixed_rows": self.fixed_rows,
            "n_rigid_dims": self.n_rigid_dims,
            "torsions": self.torsions,
        }

    @property
    def circular_mask(self) -> torch.Tensor:
        """(n_dims,) bool: flow coordinates that are angles on [-pi, pi) (circular torsions)."""
        mask = torch.zeros(self.n_dims, dtype=torch.bool, device=self.torsion_circular.device)
        start = self.n_free_bonds + self.n_ic
        mask[start : start + self.n_ic] = self.torsion_circular
        return mask

    @classmethod
    def shell(
        cls,
        molecule: Molecule,
        fix_constrained: bool = False,
        n_rigid_dims: Optional[int] = None,
        torsions: str = "logit",
    ) -> MixedCoordinateTransform:
        """Unfitted transform for `molecule` (its z-matrix, rigid block and, optionally, constraints)."""
        return cls._for_molecule(molecule, fix_constrained, n_rigid_dims, torsions)[0]

    @classmethod
    def _for_molecule(
        cls, molecule: Molecule, fix_constrained: bool, n_rigid_dims: Optional[int], torsions: str = "logit"
    ):
        zm, block, fixed, lengths = molecule_layout(molecule, fix_constrained)
        return cls(zm, block, molecule.n_atoms, fixed, n_rigid_dims, torsions), lengths

    def free_constrained_pairs(self, pairs) -> list[tuple[int, int]]:
        """Constrained atom pairs (from `pairs`, e.g. the system's constraints) left as flow dimensions.

        A pair counts when its bond is a free z-matrix bond or both atoms sit in the rigid block
        (the whitened PCA would carry the constant distance as a direction of unit spread).
        Importance weights are defined only when this list is empty.
        """
        pairs = {(min(a, b), max(a, b)) for a, b in pairs}
        free = [tuple(sorted(self.z_matrix[i][:2])) for i in range(self.n_ic) if i not in self.fixed_rows]
        block = set(self.rigid_block)
        return sorted(p for p in pairs if p in free or set(p) <= block)

    @classmethod
    def fit(
        cls,
        frames: torch.Tensor | np.ndarray,
        molecule: Molecule,
        fix_constrained: bool = False,
        n_rigid_dims: Optional[int] = None,
        min_std: float = 1e-4,
        torsion_bins: int = 36,
        max_rmsd: float = 0.05,
        torsions: str = "logit",
    ) -> MixedCoordinateTransform:
        """Fit normalizations, branch cuts, reference and PCA on training frames (n, n_atoms, 3) nm.

        min_std floors every standard deviation (nm or rad): constrained bonds are constant up to
        the constraint tolerance and float32 rounding. Raises InputError when a frame's rigid
        block stays more than max_rmsd nm from the reference after superposition.
        """
        t, lengths = cls._for_molecule(molecule, fix_constrained, n_rigid_dims, torsions)
        zm, fixed = np.asarray(t.z_matrix), t.fixed_rows
        x = frames_view(frames, t.n_atoms).detach().to("cpu", _F64)
        if x.shape[0] < 3 * len(t.rigid_block) + 1 or not torch.isfinite(x).all():
            raise InputError(f"fitting needs more than {3 * len(t.rigid_block)} finite frames, got {x.shape[0]}")
        r, a, tor = t.internal_coordinates(x)
        with torch.no_grad():
            free = t._free_rows
            if fixed:
                fixed_lengths = [lengths[(min(zm[i, :2]), max(zm[i, :2]))] for i in fixed]
                t.fixed_bond_length.copy_(torch.tensor(fixed_lengths, dtype=_F64))
                off = (r[:, fixed] - t.fixed_bond_length).abs().max().item()
                if off > 1e-3:
                    raise InputError(f"data break the bond constraints by {off:.2g} nm; fit without fix_constrained")
            t.bond_mean.copy_(r[:, free].mean(0))
            t.bond_std.copy_(r[:, free].std(0).clamp_min(min_std))
            t.angle_mean.copy_(a.mean(0))
            t.angle_std.copy_(a.std(0).clamp_min(min_std))
            t.torsion_cut.copy_(_sparsest_cut(tor, torsion_bins))
            if torsions == "circular":
                t.torsion_circular.copy_(_goes_around(tor))
            u, _ = t._torsion_to_flow(tor, standardize=False)
            mean, std = u.mean(0), u.std(0).clamp_min(min_std)
            std = _narrow_scale(u, mean, std) if torsions == "circular" else std  # spline kinds: basins inside
            t.torsion_mean.copy_(torch.where(t.torsion_circular, 0.0, mean))
            t.torsion_std.copy_(torch.where(t.torsion_circular, 1.0, std))
            t._fit_rigid(x[:, t._rigid_idx], max_rmsd)
        return t

    def _fit_rigid(self, block: torch.Tensor, max_rmsd: float) -> None:
        """Reference, PCA and largest RMSD of the superposed training blocks (`fit_rigid_block`)."""
        for name, value in zip(_RIGID_FITTED, fit_rigid_block(block, self.n_rigid_dims, max_rmsd)):
            getattr(self, name).copy_(value)

    # ------------------------------------------------------------------ helpers
    def _b(self, name: str) -> torch.Tensor:
        return getattr(self, name).to(_F64)

    def _orbit(self, block: torch.Tensor) -> torch.Tensor:
        """log|det J| of the rigid block's rotation orbit (B,), zero at the reference (module docstring)."""
        ref = self._b("rigid_ref")
        return orbit_log_volume(block, ref) - orbit_log_volume(ref, ref)

    def _align_block(self, block: torch.Tensor) -> torch.Tensor:
        c, rt = kabsch(block, self._b("rigid_ref"))
        return (block - c) @ rt

    def internal_coordinates(self, x: torch.Tensor | np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Bonds (nm), angles and torsions (rad, torsion in (-pi, pi]) of all z-matrix rows, (B, n_ic) each."""
        x = frames_view(x, self.n_atoms)
        p = [x[:, col] for col in self._ic_cols]
        return (p[0] - p[1]).norm(dim=-1), bond_angle(p[0], p[1], p[2]), dihedral(p[0], p[1], p[2], p[3])

    def superpose(self, x: torch.Tensor | np.ndarray) -> torch.Tensor:
        """Frames (B, n_atoms, 3) float64 moved so that their rigid blocks best fit the reference."""
        x = frames_view(x, self.n_atoms).to(_F64)
        c, rt = kabsch(x[:, self._rigid_idx], self._b("rigid_ref"))
        return (x - c) @ rt

    def orbit_term(self, x: torch.Tensor | np.ndarray) -> torch.Tensor:
        """Log volume of each frame's rigid-block rotation orbit (B,) float64, zero at the reference:
        the part of log|det J| that depends on the block's shape alone (module docstring)."""
        return self._orbit(self.superpose(x)[:, self._rigid_idx])

    def rigid_rmsd(self, x: torch.Tensor | np.ndarray) -> torch.Tensor:
        """RMSD (nm) of each frame's superposed rigid block to the reference, (B,) float64."""
        block = self.superpose(x)[:, self._rigid_idx]
        return (block - self._b("rigid_ref")).square().sum(-1).mean(-1).sqrt()

    def _torsion_to_flow(self, tor: torch.Tensor, standardize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Torsions (B, n_ic) rad -> torsion flow coordinates and log|d coord / dt| (B,), without
        the standardization's constant (that is in `_log_scale`)."""
        cut = self._b("torsion_cut")
        if self.torsions == "logit":
            u, logjac = _torsion_logit(tor, cut)
            logjac = -logjac
        else:
            u, logjac = torch.remainder(tor - cut, TWO_PI) - math.pi, tor.new_zeros(tor.shape[0])
        if standardize:
            u = (u - self._b("torsion_mean")) / self._b("torsion_std")
        return u, logjac

    def _torsion_from_flow(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inverse of `_torsion_to_flow`: torsions (rad) and log|dt / d coord| (B,), same convention."""
        u = self._b("torsion_mean") + self._b("torsion_std") * y
        if self.torsions == "logit":
            return _torsion_from_logit(u, self._b("torsion_cut"))
        return self._b("torsion_cut") + math.pi + u, y.new_zeros(y.shape[0])

    def _log_scale(self) -> torch.Tensor:
        """Constant part of log|det| of to_cartesian: all normalizations and the whitening."""
        return sum(self._b(n).log().sum() for n in ("bond_std", "angle_std", "torsion_std", "pca_std"))

    def _split(self, y: torch.Tensor) -> list[torch.Tensor]:
        if y.ndim != 2 or y.shape[1] != self.n_dims:
            raise InputError(f"flow coordinates must be (batch, {self.n_dims}), got {tuple(y.shape)}")
        return list(y.split([self.n_free_bonds, self.n_ic, self.n_ic, self.n_rigid_dims], dim=1))

    def _unnormalize(self, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Bonds (all rows), angles, torsions, rigid block (B, n_rb, 3) from flow coordinates (float64),
        and log|dt/du| (B,) of the torsions' sigmoid."""
        yb, ya, yt, yr = self._split(y.to(_F64))
        fixed = self._b("fixed_bond_length").expand(y.shape[0], -1)
        bonds = torch.cat((self._b("bond_mean") + self._b("bond_std") * yb, fixed), dim=1)[:, self._bond_gather]
        angles = self._b("angle_mean") + self._b("angle_std") * ya
        torsions, torsion_logjac = self._torsion_from_flow(yt)
        block = self._b("rigid_mean") + (yr * self._b("pca_std")) @ self._b("pca_vectors").T
        return bonds, angles, torsions, block.view(y.shape[0], -1, 3), torsion_logjac

    # ------------------------------------------------------------------ the two directions
    def to_cartesian(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Flow coordinates (B, n_dims) -> positions (B, n_atoms, 3) nm and log|det J| (B,)."""
        bonds, angles, torsions, block, torsion_logjac = self._unnormalize(y)
        pos = block.new_zeros(y.shape[0], self.n_atoms, 3).index_copy(1, self._rigid_idx, block)
        cols = self._ic_cols
        for name in self._levels:
            rows = getattr(self, name)
            atom, b, a, t = cols[:, rows]
            new = place_atom(pos[:, t], pos[:, a], pos[:, b], bonds[:, rows], angles[:, rows], torsions[:, rows])
            pos = pos.index_copy(1, atom, new)
        logdet = (2.0 * bonds.abs().log() + angles.sin().abs().log()).sum(1) + torsion_logjac + self._log_scale()
        return pos.to(y.dtype), (logdet + self._orbit(block)).to(y.dtype)

    def from_cartesian(self, x: torch.Tensor | np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions (B, n_atoms, 3) or (B, 3 n_atoms) nm -> flow coordinates (B, n_dims), log|det J| (B,).

        Rigid motion of x is ignored (the rigid block is superposed onto the reference first);
        the returned log|det| is that of this map, i.e. minus that of `to_cartesian` at the image.
        """
        x = frames_view(x, self.n_atoms)
        dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        x = x.to(_F64)
        bonds, angles, torsions = self.internal_coordinates(x)
        coords, torsion_logjac = self._torsion_to_flow(torsions)
        aligned = self._align_block(x[:, self._rigid_idx])
        block = aligned.reshape(x.shape[0], -1)
        y = torch.cat(
            (
                (bonds[:, self._free_rows] - self._b("bond_mean")) / self._b("bond_std"),
                (angles - self._b("angle_mean")) / self._b("angle_std"),
                coords,
                ((block - self._b("rigid_mean")) @ self._b("pca_vectors")) / self._b("pca_std"),
            ),
            dim=1,
        )
        logdet = (2.0 * bonds.log() + angles.sin().log()).sum(1) - torsion_logjac + self._log_scale()
        return y.to(dtype), (-logdet - self._orbit(aligned)).to(dtype)

    def forward(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Flow contract, z -> x direction: (B, n_dims) -> positions flattened (B, 3 n_atoms) nm."""
        x, logdet = self.to_cartesian(y)
        return x.reshape(x.shape[0], -1), logdet

    def inverse(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Flow contract, x -> z direction: positions (B, 3 n_atoms) nm -> (B, n_dims)."""
        return self.from_cartesian(x)

    # ------------------------------------------------------------------ domain and round trips
    def in_domain(self, y: torch.Tensor) -> torch.Tensor:
        """(B,) bool: bonds > 0, angles in (0, pi), non-circular torsions in (cut, cut + 2 pi), the
        rigid block at a maximum of its superposition (`on_kabsch_maximum`), all finite.

        Outside the domain the Cartesian image maps back to other flow coordinates, so log
        densities computed along z -> x are not those of the sample.
        """
        with torch.no_grad():
            bonds, angles, torsions, block, _ = self._unnormalize(y)
            cut = self._b("torsion_cut")
            ok = (bonds > 0).all(1) & ((angles > 0) & (angles < math.pi)).all(1)
            # logit: in range by construction; circular mode: narrow torsions may leave it
            narrow = ~self.torsion_circular
            ok &= ((torsions - cut)[:, narrow] > 0).all(1) & ((torsions - cut)[:, narrow] < TWO_PI).all(1)
            return ok & on_kabsch_maximum(block, self._b("rigid_ref")) & torch.isfinite(y).all(1)

    def reconstruction_error(self, x: torch.Tensor | np.ndarray) -> torch.Tensor:
        """RMSD (nm, (B,) float64) between superposed x and to_cartesian(from_cartesian(x)).

        Only the dropped PCA directions of the rigid block are lost (zero up to round-off for
        blocks that were superposed onto the same reference).
        """
        with torch.no_grad():
            x = frames_view(x, self.n_atoms).to(_F64)
            back, _ = self.to_cartesian(self.from_cartesian(x)[0])
            return (back - self.superpose(x)).square().sum(-1).mean(-1).sqrt()
