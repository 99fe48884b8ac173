"""Backbone torsions of every residue of a peptide: which atoms define them, and their values.

A residue counts when it has both backbone torsions, phi (C-N-CA-C, bonded to the residue
before) and psi (N-CA-C-N, to the residue after), as mdtraj's `compute_phi` / `compute_psi`
define them: the capped peptides' inner residues (one for alanine dipeptide, three for the
tetrapeptide). A molecule without such a residue has no peptide backbone and gets no
Ramachandran analysis. Angles in radians on [-pi, pi], positions in nm.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import mdtraj
import numpy as np

from bgp4.errors import InputError
from bgp4.simulation.molecule import backbone_pairs

__all__ = ["ResidueTorsions", "dihedral_angles", "residue_dihedrals", "residue_torsions"]


class ResidueTorsions(NamedTuple):
    """One residue's backbone torsions: its label (mdtraj's, e.g. "ALA2") and atom 4-tuples."""

    label: str
    phi: tuple[int, int, int, int]
    psi: tuple[int, int, int, int]


def _topology(molecule: Any) -> mdtraj.Topology:
    """The mdtraj topology of a `Molecule` (or a topology itself)."""
    topology = molecule if isinstance(molecule, mdtraj.Topology) else getattr(molecule, "topology", None)
    if not isinstance(topology, mdtraj.Topology):
        raise InputError(f"expected a bgp4 Molecule, got {type(molecule).__name__}")
    return topology


def residue_torsions(molecule: Any) -> list[ResidueTorsions]:
    """The residues with both phi and psi, in chain order; [] for a molecule without a peptide backbone.

    `molecule`: a `bgp4.simulation.molecule.Molecule` or an mdtraj Topology.
    """
    return [ResidueTorsions(*pair) for pair in backbone_pairs(_topology(molecule))]


def dihedral_angles(xyz: np.ndarray, molecule: Any, quartets: Any) -> np.ndarray:
    """Torsions of the atom 4-tuples `quartets` (k, 4): (n, k) float64 radians in [-pi, pi].

    Args:
        xyz: (n, n_atoms, 3) positions in nm (a single (n_atoms, 3) frame is accepted).
        molecule: a `bgp4.simulation.molecule.Molecule` (or an mdtraj Topology).
        quartets: (k, 4) atom indices, as mdtraj's `compute_dihedrals` takes them.
    """
    topology = _topology(molecule)
    frames = np.asarray(xyz, dtype=np.float64)
    if frames.ndim == 2:
        frames = frames[None]
    if frames.ndim != 3 or frames.shape[1:] != (topology.n_atoms, 3):
        raise InputError(f"xyz must have shape (n, {topology.n_atoms}, 3) in nm, got {np.shape(xyz)}")
    indices = np.asarray(quartets, dtype=np.int64).reshape(-1, 4)
    if frames.shape[0] == 0 or indices.shape[0] == 0:
        return np.zeros((frames.shape[0], indices.shape[0]))
    trajectory = mdtraj.Trajectory(frames, topology)
    return mdtraj.compute_dihedrals(trajectory, indices, periodic=False).astype(np.float64)


def residue_dihedrals(
    xyz: np.ndarray, molecule: Any, torsions: list[ResidueTorsions] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(phi, psi), each (n, R) float64 radians: column r is residue r of `torsions` (default
    `residue_torsions(molecule)`); R = 0 for a molecule without a peptide backbone.

    `xyz`: (n, n_atoms, 3) positions in nm (or one (n_atoms, 3) frame).
    """
    residues = residue_torsions(molecule) if torsions is None else torsions
    angles = dihedral_angles(xyz, molecule, [r.phi for r in residues] + [r.psi for r in residues])
    return angles[:, : len(residues)], angles[:, len(residues) :]
