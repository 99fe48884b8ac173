"""A mixed coordinate transform fitted to one structure and the force field: no MD frames.

fab-torch (Midgley et al., ICLR 2023) fits the coordinate transform of its alanine dipeptide runs
to the minimized structure alone, with fixed default widths. `fit_to_structure` does the same with
widths from the force field at the run's temperature T, so that a generator can be trained from
scratch with the energy only (reverse KL, FAB):

- centres: the structure's bonds (nm), angles and torsions (rad) and its rigid block;
- widths: harmonic ones, std_i = sqrt(kT / H_ii), where H is the Hessian (kJ/mol per nm^2 or
  rad^2) of the force field's bonded energy (`BondedEnergy`: harmonic bonds and angles, periodic
  torsions) in the transform's own coordinates at the structure, each coordinate moved with the
  others held; the rigid block's PCA directions are the eigenvectors of its part of H within the
  internal (non-rigid-motion) subspace, with variances kT / eigenvalue;
- torsions: every z-matrix torsion is turned once around the circle in those coordinates (the
  atoms placed from it follow). One whose bonded-energy barrier stays below
  `ROTATABLE_MAX_BARRIER` kJ/mol goes around: a rotatable proper torsion. For alanine dipeptide in
  amber99sb-ildn those are the three methyl rotors (0 to 12 kJ/mol), psi (18) and phi (28). The
  others stay narrow around the structure's value: the amide torsions (about 92 kJ/mol where the rest of
  the group follows, far more where it does not), improper-style sibling torsions (turning one
  substituent alone bends its angles: over 500 kJ/mol), ring torsions (turning one stretches the
  ring). The bound is an energy, not a multiple of kT: a rotatable bond is a property of the
  molecule, and the flow narrows a circular torsion where the temperature asks for it, while a
  narrow one would hide the basins beyond its barrier. A torsion that goes around is circular on
  the whole circle with torsions="circular", and with "logit" its cut sits opposite the structure
  with the width pi / sqrt(3) of a logistic, which spreads N(0, 1) nearly evenly over the circle.

Nonbonded terms are left out: the widths are scales for the flow to correct, and they must not
depend on the structure's contacts. Where a coordinate has no curvature in the bonded energy (a
force field without those terms) a default width stands in (boltzgen's: 0.005 nm, 0.15 rad, 0.2
rad). OpenMM is read only in `BondedEnergy.of_system` (imported there); no energy evaluation of the
target is spent.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional

import numpy as np
import torch

from bgp4.errors import InputError
from bgp4.flows.coordinates import MixedCoordinateTransform
from bgp4.flows.geometry import bond_angle, dihedral, frames_view
from bgp4.simulation.atoms import constrained_bonds
from bgp4.simulation.molecule import kT
from bgp4.simulation.structure import minimize

if TYPE_CHECKING:
    import openmm

    from bgp4.simulation.molecule import Molecule

__all__ = ["DEFAULT_WIDTHS", "ROTATABLE_MAX_BARRIER", "BondedEnergy", "fit_to_structure"]

_F64 = torch.float64
#: A z-matrix torsion goes around when turning it costs less than this bonded energy, kJ/mol.
ROTATABLE_MAX_BARRIER = 40.0
#: Widths where the bonded energy has no curvature: bonds (nm), angles, torsions (rad), rigid block (nm).
DEFAULT_WIDTHS = {"bond": 0.005, "angle": 0.15, "torsion": 0.2, "rigid": 0.005}
#: Bounds of the harmonic widths, same units.
_WIDTH_BOUNDS = {"bond": (1e-4, 0.02), "angle": (1e-3, 0.3), "torsion": (1e-3, 0.5), "rigid": (1e-4, 0.05)}
#: Logit torsions that go around: the logistic's standard deviation (N(0, 1) then covers the circle).
_LOGIT_AROUND_STD = math.pi / math.sqrt(3.0)
_SCAN_POINTS = 36  # 10-degree steps of each torsion scan (barriers of periodicity 1 to 3 fall on the grid)
_FLAT = 1e-6  # curvatures below this (kJ/mol per nm^2 or rad^2) are round-off: the coordinate has no term


class BondedEnergy:
    """The bonded energy of an OpenMM system in torch: harmonic bonds and angles, periodic torsions.

    E(x) = sum 1/2 k_b (r - r0)^2 + sum 1/2 k_a (a - a0)^2 + sum k_t (1 + cos(n t - t0)), in kJ/mol
    for positions x (B, n_atoms, 3) nm, float64, differentiable. Other forces are ignored.
    """

    def __init__(self, bonds: np.ndarray, angles: np.ndarray, torsions: np.ndarray):
        """bonds (nb, 4) [i, j, r0 nm, k]; angles (na, 5) [i, j, k, a0 rad, k]; torsions (nt, 7)
        [i, j, k, l, periodicity, phase rad, k kJ/mol]."""
        self.bonds = torch.as_tensor(np.asarray(bonds, dtype=np.float64).reshape(-1, 4))
        self.angles = torch.as_tensor(np.asarray(angles, dtype=np.float64).reshape(-1, 5))
        self.torsions = torch.as_tensor(np.asarray(torsions, dtype=np.float64).reshape(-1, 7))

    @classmethod
    def of_system(cls, system: openmm.System) -> BondedEnergy:
        """The HarmonicBondForce, HarmonicAngleForce and PeriodicTorsionForce terms of `system`."""
        import openmm

        def plain(values) -> list[float]:
            return [float(v.value_in_unit(v.unit)) if hasattr(v, "unit") else float(v) for v in values]

        bonds, angles, torsions = [], [], []
        for force in system.getForces():
            if isinstance(force, openmm.HarmonicBondForce):
                bonds += [plain(force.getBondParameters(i)) for i in range(force.getNumBonds())]
            elif isinstance(force, openmm.HarmonicAngleForce):
                angles += [plain(force.getAngleParameters(i)) for i in range(force.getNumAngles())]
            elif isinstance(force, openmm.PeriodicTorsionForce):
                torsions += [plain(force.getTorsionParameters(i)) for i in range(force.getNumTorsions())]
        return cls(np.array(bonds), np.array(angles), np.array(torsions))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Bonded energy (B,) in kJ/mol of positions (B, n_atoms, 3) nm."""
        x = torch.as_tensor(x).to(_F64)
        energy = x.new_zeros(x.shape[0])
        b, a, t = self.bonds, self.angles, self.torsions
        if len(b):
            i, j = b[:, 0].long(), b[:, 1].long()
            r = (x[:, i] - x[:, j]).norm(dim=-1)
            energy = energy + (0.5 * b[:, 3] * (r - b[:, 2]).square()).sum(1)
        if len(a):
            i, j, k = (a[:, c].long() for c in range(3))
            theta = bond_angle(x[:, i], x[:, j], x[:, k])
            energy = energy + (0.5 * a[:, 4] * (theta - a[:, 3]).square()).sum(1)
        if len(t):
            i, j, k, m = (t[:, c].long() for c in range(4))
            phi = dihedral(x[:, i], x[:, j], x[:, k], x[:, m])
            energy = energy + (t[:, 6] * (1.0 + torch.cos(t[:, 4] * phi - t[:, 5]))).sum(1)
        return energy


def _rigid_motion_complement(ref: torch.Tensor) -> torch.Tensor:
    """(3 n, 3 n - 6) orthonormal basis of block displacements that are no rigid motion of `ref` (n, 3).

    After a Kabsch fit onto a centred reference, a block's displacement from it lies exactly in
    this subspace (sum d_i = 0, sum ref_i x d_i = 0), so these directions lose nothing.
    """
    n = ref.shape[0]
    eye = torch.eye(3, dtype=_F64)
    moves = [eye[k].repeat(n) for k in range(3)] + [
        torch.linalg.cross(eye[k].expand(n, 3), ref).reshape(-1) for k in range(3)
    ]
    q, _ = torch.linalg.qr(torch.stack(moves, 1), mode="complete")
    return q[:, 6:]


def _probe(molecule: Molecule, x0: torch.Tensor, fix_constrained: bool) -> MixedCoordinateTransform:
    """A transform whose flow coordinates are plain displacements from the structure x0 (n_atoms, 3):
    bonds in nm, angles and torsions in rad (narrow, cut opposite x0), the rigid block along an
    orthonormal basis of its internal motions; x0 itself maps to 0."""
    t = MixedCoordinateTransform.shell(molecule, fix_constrained, torsions="circular")
    r, a, tor = t.internal_coordinates(x0[None])
    fixed = t.fixed_rows
    free = [i for i in range(t.n_ic) if i not in fixed]
    block = x0[t.rigid_block]
    ref = block - block.mean(0)
    with torch.no_grad():
        if fixed:
            lengths = constrained_bonds(molecule)
            rows = [t.z_matrix[i][:2] for i in fixed]
            t.fixed_bond_length.copy_(torch.tensor([lengths[(min(p), max(p))] for p in rows], dtype=_F64))
        t.bond_mean.copy_(r[0, free])
        t.angle_mean.copy_(a[0])
        t.torsion_cut.copy_(torch.remainder(tor[0], 2 * math.pi) - math.pi)  # opposite the structure
        for name in ("bond_std", "angle_std", "torsion_std", "pca_std"):
            getattr(t, name).fill_(1.0)
        t.rigid_ref.copy_(ref)
        t.rigid_mean.copy_(ref.reshape(-1))
        t.pca_vectors.copy_(_rigid_motion_complement(ref))
    return t


def _curvature(probe: MixedCoordinateTransform, energy: BondedEnergy) -> torch.Tensor:
    """Hessian (n_dims, n_dims) of the bonded energy in the probe's coordinates at the structure."""

    def e(y: torch.Tensor) -> torch.Tensor:
        return energy(probe.to_cartesian(y[None])[0])[0]

    return torch.autograd.functional.hessian(e, torch.zeros(probe.n_dims, dtype=_F64), vectorize=True)


def _torsion_barriers(probe: MixedCoordinateTransform, energy: BondedEnergy) -> torch.Tensor:
    """(n_ic,) kJ/mol: the bonded-energy range of each z-matrix torsion turned once around the circle."""
    n_ic, start = probe.n_ic, probe.n_free_bonds + probe.n_ic
    turns = torch.linspace(-math.pi, math.pi, _SCAN_POINTS + 1, dtype=_F64)[:-1]
    y = torch.zeros(n_ic, _SCAN_POINTS, probe.n_dims, dtype=_F64)
    y[torch.arange(n_ic), :, start + torch.arange(n_ic)] = turns
    with torch.no_grad():
        scan = energy(probe.to_cartesian(y.reshape(-1, probe.n_dims))[0]).reshape(n_ic, _SCAN_POINTS)
    return scan.max(1).values - scan.min(1).values


def _widths(curvature: torch.Tensor, thermal: float, kind: str) -> torch.Tensor:
    """Harmonic widths sqrt(kT / k) for curvatures k (kJ/mol per unit^2), bounded; the default where k <= 0."""
    low, high = _WIDTH_BOUNDS[kind]
    width = (thermal / curvature.clamp_min(1e-30)).sqrt().clamp(low, high)
    return torch.where(curvature > _FLAT, width, torch.full_like(width, DEFAULT_WIDTHS[kind]))


def _rigid_pca(hessian: torch.Tensor, basis: torch.Tensor, thermal: float, k: int):
    """Directions (3 n, k) and variances (3 n,) descending, six zeros last, of the rigid block's
    harmonic motions: eigenvectors of its Hessian block `hessian` ((3 n - 6) square, in `basis`)."""
    curv, vectors = torch.linalg.eigh(0.5 * (hessian + hessian.T))
    variance = _widths(curv, thermal, "rigid").square()
    order = variance.argsort(descending=True)
    directions = basis @ vectors[:, order]
    directions = directions * torch.sign(directions[directions.abs().argmax(0), torch.arange(directions.shape[1])])
    return directions[:, :k], torch.cat((variance[order], variance.new_zeros(6)))


def fit_to_structure(
    molecule: Molecule,
    temperature: float,
    positions: Optional[np.ndarray | torch.Tensor] = None,
    fix_constrained: bool = False,
    n_rigid_dims: Optional[int] = None,
    torsions: str = "logit",
) -> MixedCoordinateTransform:
    """A transform of `molecule` centred on its structure, with force-field widths at `temperature` K.

    positions: (n_atoms, 3) nm, the structure, best a local energy minimum of `molecule.system`
    with its constraints satisfied; default: `molecule.positions` locally minimized in that system
    (`bgp4.simulation.structure.minimize`, as fab-torch does; the built-in structures are minimized
    in the default system only). Other arguments as
    `MixedCoordinateTransform.fit`. Module docstring: how centres, widths and circular torsions are
    chosen. Raises InputError for a non-positive temperature or positions of the wrong shape.
    """
    if not temperature > 0:
        raise InputError(f"temperature must be positive (K), got {temperature}")
    if positions is None:
        positions, _ = minimize(molecule.system, molecule.positions)
    x0 = frames_view(torch.as_tensor(positions)[None], molecule.n_atoms)
    x0 = x0[0].detach().to("cpu", _F64)
    thermal = kT(temperature)
    energy = BondedEnergy.of_system(molecule.system)
    probe = _probe(molecule, x0, fix_constrained)
    hessian = _curvature(probe, energy)
    diag = hessian.diagonal()
    nb, n_ic = probe.n_free_bonds, probe.n_ic
    around = _torsion_barriers(probe, energy) < ROTATABLE_MAX_BARRIER
    t = MixedCoordinateTransform.shell(molecule, fix_constrained, n_rigid_dims, torsions)
    torsion_width = _widths(diag[nb + n_ic : nb + 2 * n_ic], thermal, "torsion")
    if torsions == "logit":  # du/dt = 2 / pi at the centre of the logit's range
        torsion_std = torch.where(around, _LOGIT_AROUND_STD, torsion_width * 2.0 / math.pi)
    else:  # around: an angle on the whole circle
        torsion_std = torch.where(around, 1.0, torsion_width)
    rigid = slice(nb + 2 * n_ic, None)
    vectors, variances = _rigid_pca(hessian[rigid, rigid], probe.pca_vectors, thermal, t.n_rigid_dims)
    with torch.no_grad():
        for name in ("bond_mean", "fixed_bond_length", "angle_mean", "torsion_cut", "rigid_ref", "rigid_mean"):
            getattr(t, name).copy_(getattr(probe, name))
        t.bond_std.copy_(_widths(diag[:nb], thermal, "bond"))
        t.angle_std.copy_(_widths(diag[nb : nb + n_ic], thermal, "angle"))
        t.torsion_mean.zero_()  # the cut sits opposite the structure: its torsions map to 0
        t.torsion_std.copy_(torsion_std)
        t.torsion_circular.copy_(around & (torsions == "circular"))
        t.pca_vectors.copy_(vectors)
        t.pca_eigenvalues.copy_(variances)
        t.pca_std.copy_(variances[: t.n_rigid_dims].sqrt())
        t.fit_max_rmsd.zero_()
    return t
