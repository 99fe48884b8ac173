"""Geometry of internal coordinates in float64 torch: bonds, angles, torsions, NeRF placement, Kabsch fits
and the rotation-orbit volume of a superposed block.

Positions are in nm, angles in radians. Shapes: (..., 3) per atom position unless stated.
"""

from __future__ import annotations

import numpy as np
import torch

from bgp4.errors import InputError

__all__ = ["frames_view", "bond_angle", "dihedral", "place_atom", "kabsch", "orbit_log_volume", "on_kabsch_maximum"]


def frames_view(x: torch.Tensor | np.ndarray, n_atoms: int) -> torch.Tensor:
    """(batch, n_atoms, 3) view of x given as (batch, 3 n_atoms) or (batch, n_atoms, 3)."""
    x = torch.as_tensor(x)
    if x.ndim == 2 and x.shape[1] == 3 * n_atoms:
        return x.view(x.shape[0], n_atoms, 3)
    if x.ndim == 3 and tuple(x.shape[1:]) == (n_atoms, 3):
        return x
    raise InputError(f"positions must be (batch, {n_atoms}, 3) or (batch, {3 * n_atoms}) in nm, got {tuple(x.shape)}")


def bond_angle(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Angle a-b-c in rad (vertex b) of (..., 3) positions; atan2 form, accurate near 0 and pi."""
    u, v = a - b, c - b
    return torch.atan2(torch.linalg.cross(u, v).norm(dim=-1), (u * v).sum(-1))


def dihedral(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Torsion a-b-c-d in rad, (-pi, pi], IUPAC sign (as mdtraj.compute_dihedrals)."""
    b1, b2, b3 = b - a, c - b, d - c
    n1, n2 = torch.linalg.cross(b1, b2), torch.linalg.cross(b2, b3)
    y = b2.norm(dim=-1) * (b1 * n2).sum(-1)
    return torch.atan2(y, (n1 * n2).sum(-1))


def place_atom(a, b, c, r, theta, phi) -> torch.Tensor:
    """Position d with |d - c| = r, angle b-c-d = theta, torsion a-b-c-d = phi (NeRF)."""
    bc = c - b
    bc = bc / bc.norm(dim=-1, keepdim=True)
    n = torch.linalg.cross(b - a, bc)
    n = n / n.norm(dim=-1, keepdim=True)
    m = torch.linalg.cross(n, bc)
    rs = r * torch.sin(theta)
    d = (-r * torch.cos(theta)).unsqueeze(-1) * bc + (rs * torch.cos(phi)).unsqueeze(-1) * m
    return c + d + (rs * torch.sin(phi)).unsqueeze(-1) * n


def kabsch(p: torch.Tensor, ref: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Centroids (B, 1, 3) and rotations Rt (B, 3, 3) with (p - centroid) @ Rt ~ ref (centered).

    Float64 SVD; the rotation is treated as a constant by autograd (it is chosen, not learned).
    """
    centroid = p.mean(dim=1, keepdim=True)
    with torch.no_grad():
        h = (p - centroid).transpose(1, 2) @ ref
        u, _, vh = torch.linalg.svd(h)
        d = torch.sign(torch.linalg.det(u @ vh))
        flip = torch.ones_like(u[:, 0, :])
        flip[:, 2] = d  # avoid reflections: det(R) = +1
        rt = (u * flip.unsqueeze(1)) @ vh
    return centroid, rt


def orbit_log_volume(block: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """log|det A| (B,) of superposed blocks (B, n, 3) against the centred reference (n, 3) they fit.

    A = S^T R - tr(S^T R) I (S the centred block, R the reference) maps a small rotation w of the
    block to the change of its superposition condition sum_i s_i x r_i = 0. The Cartesian volume
    of a block superposed this way is the volume of its superposed coordinates times |det A| (the
    size of its orbit under rotation, translation's being constant), so a density over superposed
    coordinates becomes one over Cartesian positions only with this factor. |det A| depends on how
    the block is stretched: unit masses, -det of the inertia tensor at S = R.
    """
    return torch.linalg.slogdet(_orbit_matrix(block, ref))[1]


def on_kabsch_maximum(block: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """(B,) bool: superposed blocks (B, n, 3) whose orientation is a strict maximum of the Kabsch fit
    to `ref` (A negative definite), not a saddle, so that superposing them again leaves them as they are."""
    return torch.linalg.eigvalsh(_orbit_matrix(block, ref)).amax(-1) < 0


def _orbit_matrix(block: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """A = S^T R - tr(S^T R) I (B, 3, 3) of `orbit_log_volume`; symmetric for a superposed block."""
    s = block - block.mean(dim=-2, keepdim=True)
    h = s.transpose(-1, -2) @ ref
    eye = torch.eye(3, dtype=h.dtype, device=h.device)
    return h - h.diagonal(dim1=-2, dim2=-1).sum(-1)[..., None, None] * eye
