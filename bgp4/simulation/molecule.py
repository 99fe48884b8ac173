"""The molecules bgp4 knows: OpenMM system, topology, structure and z-matrix of each.

This is the only module that knows which molecule it is: every stage takes a `Molecule`, or
looks one up by the name a data file, run or model file records (`get_molecule`,
`molecule_of`): alanine dipeptide (the default), the alanine tetra- and hexapeptide, and any
capped peptide named `sequence:<one-letter codes>` (built by `bgp4.simulation.peptide`), all in
implicit solvent.

Units: positions in nm, energies in kJ/mol, temperatures in K.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import mdtraj
import numpy as np
import openmm
import openmm.app as app

from bgp4.errors import InputError
from bgp4.simulation.peptide import FORCE_FIELD, build_capped_peptide, check_sequence, create_system
from bgp4.simulation.zmatrix import automatic_zmatrix

__all__ = [
    "KB_KJ_PER_MOL_K",
    "PDB_RESOURCE",
    "FORCE_FIELD",
    "Z_MATRIX",
    "RIGID_BLOCK",
    "PHI",
    "PSI",
    "kT",
    "Molecule",
    "alanine_dipeptide",
    "PEPTIDES",
    "SEQUENCE_PREFIX",
    "peptide_molecule",
    "DEFAULT_MOLECULE",
    "MOLECULES",
    "molecule_name",
    "get_molecule",
    "molecule_of",
    "constrained_bonds",
    "constraint_free_layout",
    "rotor_hydrogens",
]

#: Boltzmann constant in kJ/mol/K (OpenMM's value, CODATA 2018).
KB_KJ_PER_MOL_K = 0.00831446261815324

#: The structure ships inside the package (bgp4/simulation/resources/), so any install finds it.
PDB_RESOURCE = ("resources", "alanine-dipeptide.pdb")
# FORCE_FIELD (amber99sb-ildn + amber96 OBC) comes from bgp4.simulation.peptide, which builds with it.

#: Rows [atom, bond partner, angle partner, torsion partner] (REFERENCE section 3), reordered
#: so that every reference atom is in the rigid block or placed by an earlier row.
Z_MATRIX = np.array(
    [
        [4, 6, 8, 14],
        [1, 4, 6, 8],
        [0, 1, 4, 6],
        [2, 1, 4, 0],
        [3, 1, 4, 0],
        [5, 4, 6, 8],
        [7, 6, 8, 4],
        [11, 10, 8, 6],
        [12, 10, 8, 11],
        [13, 10, 8, 11],
        [16, 14, 8, 6],
        [15, 14, 8, 16],
        [17, 16, 14, 15],
        [18, 16, 14, 8],
        [19, 18, 16, 14],
        [20, 18, 16, 19],
        [21, 18, 16, 19],
    ],
    dtype=np.int64,
)
RIGID_BLOCK = np.array([6, 8, 9, 10, 14], dtype=np.int64)
PHI = (4, 6, 8, 14)
PSI = (6, 8, 14, 16)


def kT(temperature: float) -> float:
    """Thermal energy k_B T in kJ/mol at `temperature` in K."""
    return KB_KJ_PER_MOL_K * float(temperature)


@dataclass(frozen=True)
class Molecule:
    """Everything bgp4 needs to know about one molecule.

    Attributes:
        name: short label stored in files.
        system: the OpenMM system (forces, constraints, masses).
        topology: mdtraj topology, atom order as in `positions`.
        positions: (n_atoms, 3) float64 structure in nm.
        z_matrix: (n_ic, 4) rows [atom, bond, angle, torsion partner].
        rigid_block: atom indices kept in Cartesian coordinates.
        phi, psi: backbone torsion atom 4-tuples.
        force_field: names of the force-field files, stored as run metadata.
    """

    name: str
    system: openmm.System
    topology: mdtraj.Topology
    positions: np.ndarray
    z_matrix: np.ndarray
    rigid_block: np.ndarray
    phi: tuple[int, int, int, int]
    psi: tuple[int, int, int, int]
    force_field: tuple[str, ...] = field(default=FORCE_FIELD)

    @property
    def n_atoms(self) -> int:
        return int(self.positions.shape[0])

    def kT(self, temperature: float) -> float:
        """k_B T in kJ/mol at `temperature` K."""
        return kT(temperature)

    def system_xml(self) -> str:
        """The OpenMM system serialized to XML (workers rebuild contexts from it)."""
        return openmm.XmlSerializer.serialize(self.system)


def alanine_dipeptide() -> Molecule:
    """Ace-Ala-Nme with amber99sb-ildn + amber96 OBC implicit solvent, NoCutoff, HBonds.

    The structure ships as package data, `bgp4/simulation/resources/alanine-dipeptide.pdb` (from the
    openmmtools wheel), so nothing is fetched at run time. Its potential energy is -95.70 kJ/mol.
    """
    with resources.as_file(resources.files("bgp4.simulation").joinpath(*PDB_RESOURCE)) as path:
        pdb = app.PDBFile(str(path))
    forcefield = app.ForceField(*FORCE_FIELD)
    system = forcefield.createSystem(
        pdb.topology,
        nonbondedMethod=app.NoCutoff,
        constraints=app.HBonds,
        removeCMMotion=True,
    )
    positions = np.array(pdb.getPositions(asNumpy=True).value_in_unit(openmm.unit.nanometer), dtype=np.float64)
    return Molecule(
        name=DEFAULT_MOLECULE,
        system=system,
        topology=mdtraj.Topology.from_openmm(pdb.topology),
        positions=positions,
        z_matrix=Z_MATRIX.copy(),
        rigid_block=RIGID_BLOCK.copy(),
        phi=PHI,
        psi=PSI,
    )


def _central_torsions(topology: mdtraj.Topology) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(phi, psi) atom quartets of the middle residue that has both (mdtraj's quartets)."""
    traj = mdtraj.Trajectory(np.zeros((1, topology.n_atoms, 3), dtype=np.float32), topology)
    phis, psis = mdtraj.compute_phi(traj)[0], mdtraj.compute_psi(traj)[0]
    by_ca = {int(q[1]): tuple(int(a) for a in q) for q in psis}  # psi is N-CA-C-N, phi C-N-CA-C
    pairs = [(tuple(int(a) for a in q), by_ca[int(q[2])]) for q in phis if int(q[2]) in by_ca]
    if not pairs:
        raise InputError("the molecule has no residue with both backbone torsions phi and psi")
    return pairs[(len(pairs) - 1) // 2]


def peptide_molecule(name: str, topology: app.Topology, positions: np.ndarray) -> Molecule:
    """A Molecule of a peptide in bgp4's system (FORCE_FIELD, `create_system`), `positions` in nm.

    The z-matrix and rigid block are `automatic_zmatrix`'s; phi and psi are those of the central
    residue (of the two central ones, the first), which the single-pair analysis reads.
    """
    md_topology = mdtraj.Topology.from_openmm(topology)
    z_matrix, rigid_block = automatic_zmatrix(md_topology)
    phi, psi = _central_torsions(md_topology)
    return Molecule(
        name=name,
        system=create_system(topology),
        topology=md_topology,
        positions=np.asarray(positions, dtype=np.float64),
        z_matrix=z_matrix,
        rigid_block=rigid_block,
        phi=phi,
        psi=psi,
    )


#: Built-in peptides: name -> sequence between the ACE and NME caps. Each structure ships as
#: bgp4/simulation/resources/<name>.pdb, made by run/scripts/build_peptides.py with `build_capped_peptide`.
PEPTIDES = {"alanine-tetrapeptide": "AAA", "alanine-hexapeptide": "AAAAA"}
#: Prefix of a molecule name that is a capped-peptide sequence: "sequence:AAA" is Ace-Ala3-Nme.
SEQUENCE_PREFIX = "sequence:"


def _shipped_peptide(name: str) -> Molecule:
    """The built-in peptide `name` from its shipped structure."""
    with resources.as_file(resources.files("bgp4.simulation").joinpath("resources", f"{name}.pdb")) as path:
        pdb = app.PDBFile(str(path))
    positions = pdb.getPositions(asNumpy=True).value_in_unit(openmm.unit.nanometer)
    return peptide_molecule(name, pdb.topology, positions)


@functools.lru_cache(maxsize=8)
def _built(sequence: str) -> tuple[app.Topology, np.ndarray]:
    # Built once per process: every stage that reads a data file asks for its molecule again.
    return build_capped_peptide(sequence)


def _sequence_peptide(name: str) -> Molecule:
    topology, positions = _built(name.removeprefix(SEQUENCE_PREFIX))
    return peptide_molecule(name, topology, positions.copy())


#: The molecule of data files that record none (plain mdtraj files, files of older versions).
DEFAULT_MOLECULE = "alanine-dipeptide"
#: Registered molecules by the name files record (and any "sequence:<codes>", built on demand).
MOLECULES: dict[str, Callable[[], Molecule]] = {
    DEFAULT_MOLECULE: alanine_dipeptide,
    **{name: functools.partial(_shipped_peptide, name) for name in PEPTIDES},
}


def molecule_name(name: str | None = None) -> str:
    """The registered name `name` stands for (None or "": the default; "sequence:aaa": "sequence:AAA").

    Raises InputError for an unknown name or a sequence letter that is no amino acid.
    """
    name = str(name) if name else DEFAULT_MOLECULE
    if name.startswith(SEQUENCE_PREFIX):
        return SEQUENCE_PREFIX + check_sequence(name.removeprefix(SEQUENCE_PREFIX))
    if name not in MOLECULES:
        raise InputError(f"unknown molecule {name!r}; bgp4 knows {', '.join(MOLECULES)} and {SEQUENCE_PREFIX}<SEQ>")
    return name


def get_molecule(name: str | None = None) -> Molecule:
    """The molecule registered as `name` (None or "": the default); raises InputError for an unknown name."""
    name = molecule_name(name)
    if name.startswith(SEQUENCE_PREFIX):
        return _sequence_peptide(name)
    return MOLECULES[name]()


def molecule_of(record: Mapping[str, Any] | None, n_atoms: int | None = None, source: object = "the file") -> Molecule:
    """The molecule a settings record (of a data file, run or model) names; the default where it
    names none. With `n_atoms` (atoms per frame of the file), a mismatch raises InputError."""
    molecule = get_molecule((record or {}).get("molecule"))
    if n_atoms is not None and n_atoms != molecule.n_atoms:
        raise InputError(f"{source} has {n_atoms} atoms per frame, expected {molecule.n_atoms} ({molecule.name})")
    return molecule


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
