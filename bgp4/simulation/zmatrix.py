"""An automatic z-matrix from the bond graph, for any molecule.

`automatic_zmatrix(topology)` returns `(z_matrix, rigid_block)` in the format `Molecule` holds:
rows [atom, bond partner, angle partner, torsion partner] in placement order, every reference
atom in the rigid block or placed by an earlier row, and the atom indices kept Cartesian. Only
the bond graph is read (no positions), so there are no units here; the coordinates the rows
define are bonds in nm and angles and torsions in rad (`bgp4.flows.MixedCoordinateTransform`).

How the atoms are placed:

- rigid block: the heavy atom at the centre of the heavy-atom graph (for a peptide a central CA,
  also where it is one bond off the centre) and up to three of its heavy neighbours. For alanine
  dipeptide that is N, CA, CB, C ([6, 8, 10, 14]): the hand-written block without HA, as
  `constraint_free_layout` makes it.
- heavy atoms: breadth-first from the block, layer by layer; within a layer backbone atoms first
  (so the chain is placed before its substituents), then atoms that carry more heavy neighbours.
- hydrogens last, each with its own heavy atom as bond partner, so every X-H constraint is a
  z-matrix bond (held fixed with `fix_constrained`).
- angle partner: a placed neighbour of the bond partner. Torsion partner: a placed sibling (another
  substituent of the bond partner) where there is one, an improper-style torsion such as
  [12, 10, 8, 11]; it stays near +-120 or 180 degrees, and its sign fixes the handedness of a
  stereocentre. Otherwise a placed neighbour of the angle partner, backbone atoms first, so that
  phi, psi and omega of a peptide are z-matrix torsions.

Ties are broken by residue index and atom name before the atom index, so the same molecule with its
atoms in another order gets the same rows, relabelled.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

import mdtraj
import networkx as nx
import numpy as np

__all__ = [
    "BACKBONE_NAMES",
    "automatic_zmatrix",
    "backbone_torsion_rows",
    "torsion_row",
    "with_automatic_zmatrix",
]

#: Atom names of a peptide's main chain (CH3: the methyl carbon of the ACE cap; NME's methyl is named C).
BACKBONE_NAMES = frozenset({"N", "CA", "C", "CH3"})


class _Walk:
    """The bond graph, the atoms placed so far (in order) and the z-matrix rows that placed them."""

    def __init__(self, topology: mdtraj.Topology):
        self.atoms = list(topology.atoms)
        self.graph = nx.Graph()
        self.graph.add_nodes_from(range(topology.n_atoms))
        self.graph.add_edges_from((a.index, b.index) for a, b in topology.bonds)
        # Hydrogens that hang on one heavy atom are placed last; every other atom is skeleton.
        self.hangers = {
            a.index
            for a in self.atoms
            if _is_hydrogen(a) and self.graph.degree[a.index] == 1 and not _is_hydrogen(self._neighbour(a.index))
        }
        self.skeleton = self.graph.subgraph(i for i in range(topology.n_atoms) if i not in self.hangers)
        self.rank: dict[int, int] = {}
        self.rows: list[list[int]] = []

    def _neighbour(self, i: int) -> mdtraj.core.topology.Atom:
        return self.atoms[next(iter(self.graph[i]))]

    def label(self, i: int) -> tuple[int, str, int]:
        """Order-free name of atom i: residue index, atom name (the index only breaks what is left)."""
        return (self.atoms[i].residue.index, self.atoms[i].name, i)

    def priority(self, i: int) -> tuple:
        """Sort key among candidates in one layer: backbone first, then more skeleton neighbours."""
        return (self.atoms[i].name not in BACKBONE_NAMES, -self.skeleton.degree[i], self.label(i))

    def reference_key(self, i: int) -> tuple:
        """Sort key among placed reference atoms: skeleton, backbone, placed earliest."""
        return (i in self.hangers, self.atoms[i].name not in BACKBONE_NAMES, self.rank[i])

    def placed_neighbours(self, i: int, exclude: set[int]) -> list[int]:
        """Placed neighbours of atom i outside `exclude`, best reference first."""
        found = [n for n in self.graph[i] if n in self.rank and n not in exclude]
        return sorted(found, key=self.reference_key)

    def place(self, atom: int, bond: int) -> None:
        """Append the row that places `atom` from its placed neighbour `bond`."""
        angles = self.placed_neighbours(bond, {atom})
        if not angles:
            raise ValueError(f"atom {bond} has no placed neighbour to make an angle with")
        angle = angles[0]
        torsions = angles[1:] or self.placed_neighbours(angle, {atom, bond})
        if not torsions:  # a dead end: any placed atom will do
            torsions = sorted((i for i in self.rank if i not in (atom, bond, angle)), key=self.reference_key)
        self.rows.append([atom, bond, angle, torsions[0]])
        self.rank[atom] = len(self.rank)


def _is_hydrogen(atom: mdtraj.core.topology.Atom) -> bool:
    return atom.element is not None and atom.element.symbol == "H"


def _choose_block(walk: _Walk, size: int = 4) -> list[int]:
    """The centre of the skeleton and up to size - 1 neighbours, centre first (at least 3 atoms)."""
    skeleton = walk.skeleton if walk.skeleton.number_of_nodes() >= 3 else walk.graph
    eccentricity = nx.eccentricity(skeleton)
    # A CA one step off the centre still wins: its block (N, CA, CB, C) holds the stereocentre.
    ca = {i for i in skeleton if walk.atoms[i].name == "CA"}
    centre = min(skeleton, key=lambda i: (eccentricity[i] - (i in ca), i not in ca) + walk.priority(i))
    block = [centre] + sorted(skeleton[centre], key=walk.priority)[: size - 1]
    if len(block) < 3:  # a short skeleton: fill breadth-first from the centre over every atom
        distance = nx.single_source_shortest_path_length(walk.graph, centre)
        rest = sorted((i for i in distance if i not in block), key=lambda i: (distance[i], i in walk.hangers, i))
        block += rest[: 3 - len(block)]
    return block


def automatic_zmatrix(topology: mdtraj.Topology) -> tuple[np.ndarray, np.ndarray]:
    """(z_matrix, rigid_block) of the molecule `topology` describes, from its bonds alone.

    z_matrix: (n_atoms - n_block, 4) int64 rows [atom, bond, angle, torsion partner] in placement
    order; rigid_block: (n_block,) int64 sorted atom indices kept Cartesian (module docstring).
    Raises ValueError for fewer than 3 atoms or a bond graph in more than one piece.
    """
    if topology.n_atoms < 3:
        raise ValueError(f"a z-matrix with a rigid block needs at least 3 atoms, got {topology.n_atoms}")
    walk = _Walk(topology)
    if not nx.is_connected(walk.graph):
        raise ValueError("the bond graph is in more than one piece: every atom must be bonded to the molecule")
    block = _choose_block(walk)
    for i in block:
        walk.rank[i] = len(walk.rank)
    skeleton_block = [i for i in block if i in walk.skeleton]
    distance = nx.multi_source_dijkstra_path_length(walk.skeleton, skeleton_block)
    for atom in sorted((i for i in distance if i not in walk.rank), key=lambda i: (distance[i],) + walk.priority(i)):
        walk.place(atom, walk.placed_neighbours(atom, set())[0])
    hangers = [i for i in walk.hangers if i not in walk.rank]
    for atom in sorted(hangers, key=lambda i: (walk.rank[next(iter(walk.graph[i]))], walk.label(i))):
        walk.place(atom, next(iter(walk.graph[atom])))
    return np.array(walk.rows, dtype=np.int64).reshape(-1, 4), np.array(sorted(block), dtype=np.int64)


def torsion_row(z_matrix: np.ndarray, quartet) -> int | None:
    """Index of the z-matrix row whose four atoms are `quartet`, in either direction; None if none is."""
    quartet = [int(a) for a in quartet]
    for i, row in enumerate(np.asarray(z_matrix).tolist()):
        if row == quartet or row == quartet[::-1]:
            return i
    return None


def backbone_torsion_rows(topology: mdtraj.Topology, z_matrix: np.ndarray) -> dict[str, list[int | None]]:
    """Rows of `z_matrix` that are the backbone torsions "phi", "psi", "omega" (mdtraj's atom quartets).

    One entry per torsion mdtraj finds, in its order; None where that torsion is no z-matrix row.
    """
    traj = mdtraj.Trajectory(np.zeros((1, topology.n_atoms, 3), dtype=np.float32), topology)
    found = {"phi": mdtraj.compute_phi, "psi": mdtraj.compute_psi, "omega": mdtraj.compute_omega}
    return {name: [torsion_row(z_matrix, q) for q in compute(traj)[0]] for name, compute in found.items()}


# The Molecule dataclass, by type only: bgp4.simulation.molecule builds its peptides with this module,
# so importing it here would close an import cycle.
_Molecule = TypeVar("_Molecule")


def with_automatic_zmatrix(molecule: _Molecule) -> _Molecule:
    """A copy of `molecule` whose z-matrix and rigid block are `automatic_zmatrix`'s of its topology."""
    z_matrix, rigid_block = automatic_zmatrix(molecule.topology)
    return dataclasses.replace(molecule, z_matrix=z_matrix, rigid_block=rigid_block)
