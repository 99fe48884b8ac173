"""What a molecule's OpenMM system says of its atoms, for any molecule: the bonds it holds
fixed, a flow layout with none of them inside the rigid block, and the interchangeable
(methyl-like) hydrogen triples.

Lengths in nm, masses in dalton.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import openmm

if TYPE_CHECKING:
    from bgp4.simulation.molecule import Molecule

__all__ = ["constrained_bonds", "constraint_free_layout", "rotor_hydrogens"]


def constrained_bonds(molecule: Molecule) -> dict[tuple[int, int], float]:
    """Constrained atom pairs (sorted) -> constraint length in nm."""
    out = {}
    for i in range(molecule.system.getNumConstraints()):
        a, b, d = molecule.system.getConstraintParameters(i)
        out[(min(a, b), max(a, b))] = d.value_in_unit(openmm.unit.nanometer)
    return out


def constraint_free_layout(molecule: Molecule) -> tuple[np.ndarray, np.ndarray]:
    """(z_matrix, rigid_block) of `molecule` with no constrained pair left inside the rigid block.

    A constrained pair with both atoms in the block would survive as one of the block's PCA
    directions (a constant the flow must squeeze, whitened to unit spread like every other), so
    the lighter atom of each such pair leaves the block and is placed by a new z-matrix row
    [atom, partner, a, b] whose bond is the constraint: a and b are the partner's other bonded
    neighbours in the block (or a's neighbour when the partner has just one). For alanine
    dipeptide HA (9) leaves and is placed by [9, 8, 6, 10].
    """
    block = [int(a) for a in molecule.rigid_block]
    rows = [list(map(int, r)) for r in molecule.z_matrix]
    masses = [molecule.system.getParticleMass(i).value_in_unit(openmm.unit.dalton) for i in range(molecule.n_atoms)]
    neighbours: dict[int, set[int]] = {i: set() for i in range(molecule.n_atoms)}
    for bond in molecule.topology.bonds:
        neighbours[bond[0].index].add(bond[1].index)
        neighbours[bond[1].index].add(bond[0].index)
    for a, b in sorted(constrained_bonds(molecule)):
        if a not in block or b not in block:
            continue
        atom, partner = (a, b) if masses[a] < masses[b] else (b, a)
        block.remove(atom)
        refs = sorted(n for n in neighbours[partner] if n in block)
        if not refs:
            raise ValueError(f"atom {partner} has no bonded neighbour left in the rigid block")
        if len(refs) == 1:
            refs += sorted(n for n in neighbours[refs[0]] if n in block and n != partner)[:1]
        if len(refs) < 2 or len(block) < 3:
            raise ValueError(f"cannot place atom {atom} from the rigid block {block}")
        rows.append([atom, partner, refs[0], refs[1]])
    return np.array(rows, dtype=np.int64), np.array(block, dtype=np.int64)


#: Forces whose getParticleParameters(i) gives the parameters of atom i (others, such as
#: CustomExternalForce, number their terms instead of their atoms).
_PER_ATOM_FORCES = (openmm.NonbondedForce, openmm.GBSAOBCForce, openmm.CustomNonbondedForce, openmm.CustomGBForce)


def _particle_parameters(system: openmm.System, atom: int) -> tuple:
    """Every per-atom force-field parameter of `atom` (nonbonded, implicit solvent), unit-free."""
    values = []
    for force in system.getForces():
        if isinstance(force, _PER_ATOM_FORCES):
            params = force.getParticleParameters(atom)
            values.extend(p.value_in_unit(p.unit) if hasattr(p, "unit") else p for p in params)
    return tuple(float(v) for v in values)


def rotor_hydrogens(molecule: Molecule) -> list[tuple[int, int, int]]:
    """Triples of interchangeable hydrogens: three H on one atom with identical per-atom parameters.

    Relabelling such a triple cyclically (a -> b -> c -> a) permutes identical atoms; for a methyl
    group that is nearly a 120-degree rotation about the bond to its carbon. Only the per-atom
    (nonbonded, implicit-solvent) parameters are compared here; that the bonded terms treat the
    three alike too is checked against OpenMM's energy in the tests. Each MD frame then stands for
    three equally likely frames per triple (the methyl groups of alanine dipeptide: (0, 2, 3),
    (11, 12, 13), (19, 20, 21)).
    """
    hydrogens: dict[int, list[int]] = {}
    for bond in molecule.topology.bonds:
        for a, b in ((bond[0], bond[1]), (bond[1], bond[0])):
            if a.element.symbol == "H" and b.element.symbol != "H":
                hydrogens.setdefault(b.index, []).append(a.index)
    triples = []
    for atoms in hydrogens.values():
        if len(atoms) == 3 and len({_particle_parameters(molecule.system, h) for h in atoms}) == 1:
            triples.append(tuple(sorted(atoms)))
    return sorted(triples)
