"""The molecules bgp4 knows: OpenMM system, topology, structure and z-matrix of each.

This is the only module that knows which molecule it is: every stage takes a `Molecule`, or
looks one up by the settings record of a data file, run or model file (`molecule_of`), which
names the molecule and its system (`bgp4.simulation.system.SystemSpec`: force field, solvent,
constraints). Molecules come from three sources:

- a built-in name: alanine dipeptide (the default), the alanine tetra- and hexapeptide;
- `sequence:<one-letter codes>`, a capped peptide built by `bgp4.simulation.peptide`;
- a structure file (`pdb_molecule`), named `pdb:<file stem>`; its prepared structure travels in
  the records as PDB text, so later stages need no file but the data file.

Units: positions in nm, energies in kJ/mol, temperatures in K.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import mdtraj
import numpy as np
import openmm
import openmm.app as app

from bgp4.errors import InputError
from bgp4.simulation.peptide import build_capped_peptide, check_sequence
from bgp4.simulation.structure import pdb_text, prepare_structure, read_structure
from bgp4.simulation.system import SystemSpec
from bgp4.simulation.zmatrix import automatic_zmatrix

__all__ = [
    "KB_KJ_PER_MOL_K",
    "PDB_RESOURCE",
    "Z_MATRIX",
    "RIGID_BLOCK",
    "PHI",
    "PSI",
    "kT",
    "Molecule",
    "alanine_dipeptide",
    "platform_traits",
    "backbone_pairs",
    "central_pair",
    "PEPTIDES",
    "SEQUENCE_PREFIX",
    "PDB_PREFIX",
    "peptide_molecule",
    "pdb_molecule",
    "DEFAULT_MOLECULE",
    "MOLECULES",
    "molecule_name",
    "get_molecule",
    "molecule_of",
    "check_same_molecule",
]

T = TypeVar("T")

#: Boltzmann constant in kJ/mol/K (OpenMM's value, CODATA 2018).
KB_KJ_PER_MOL_K = 0.00831446261815324

#: The structure ships inside the package (bgp4/simulation/resources/), so any install finds it.
PDB_RESOURCE = ("resources", "alanine-dipeptide.pdb")

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
        phi, psi: backbone torsion atom 4-tuples (of the central residue).
        spec: force field, solvent and constraints the system was built with.
        structure: PDB text of a molecule read from a file ("" for a built-in or sequence one).
    """

    name: str
    system: openmm.System
    topology: mdtraj.Topology
    positions: np.ndarray
    z_matrix: np.ndarray
    rigid_block: np.ndarray
    phi: tuple[int, int, int, int]
    psi: tuple[int, int, int, int]
    spec: SystemSpec = field(default_factory=SystemSpec)
    structure: str = ""

    @property
    def n_atoms(self) -> int:
        return int(self.positions.shape[0])

    @property
    def force_field(self) -> tuple[str, ...]:
        """Names of the OpenMM force-field files of the system."""
        return self.spec.files()

    def kT(self, temperature: float) -> float:
        """k_B T in kJ/mol at `temperature` K."""
        return kT(temperature)

    def system_xml(self) -> str:
        """The OpenMM system serialized to XML (workers rebuild contexts from it)."""
        return openmm.XmlSerializer.serialize(self.system)

    def record(self) -> dict[str, Any]:
        """What a settings record stores so that `molecule_of` rebuilds this molecule: its name,
        its system (`SystemSpec.record`) and, for a structure file, the structure itself."""
        out = {"molecule": self.name, **self.spec.record()}
        if self.structure:
            out["structure"] = self.structure
        return out


def alanine_dipeptide(spec: SystemSpec = SystemSpec()) -> Molecule:
    """Ace-Ala-Nme; by default amber99sb-ildn + amber96 OBC implicit solvent, NoCutoff, HBonds.

    The structure ships as package data, `bgp4/simulation/resources/alanine-dipeptide.pdb` (from the
    openmmtools wheel), so nothing is fetched at run time. Its potential energy is -95.70 kJ/mol.
    """
    with resources.as_file(resources.files("bgp4.simulation").joinpath(*PDB_RESOURCE)) as path:
        pdb = app.PDBFile(str(path))
    positions = np.array(pdb.getPositions(asNumpy=True).value_in_unit(openmm.unit.nanometer), dtype=np.float64)
    return Molecule(
        name=DEFAULT_MOLECULE,
        system=spec.create_system(pdb.topology),
        topology=mdtraj.Topology.from_openmm(pdb.topology),
        positions=positions,
        z_matrix=Z_MATRIX.copy(),
        rigid_block=RIGID_BLOCK.copy(),
        phi=PHI,
        psi=PSI,
        spec=spec,
    )


def backbone_pairs(topology: mdtraj.Topology) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    """(residue label, phi quartet, psi quartet) of every residue that has both, in chain order
    (mdtraj's quartets: phi C-N-CA-C, psi N-CA-C-N); [] for a molecule without a peptide backbone."""
    if topology.n_atoms == 0:
        return []
    # mdtraj finds the quartets from the topology alone; the coordinates of this frame do not matter
    traj = mdtraj.Trajectory(np.zeros((1, topology.n_atoms, 3), dtype=np.float32), topology)
    with np.errstate(invalid="ignore", divide="ignore"):
        phis, psis = mdtraj.compute_phi(traj)[0], mdtraj.compute_psi(traj)[0]
    by_ca = {int(q[1]): tuple(int(a) for a in q) for q in psis}
    return [
        (str(topology.atom(int(q[2])).residue), tuple(int(a) for a in q), by_ca[int(q[2])])
        for q in phis
        if int(q[2]) in by_ca
    ]


def central_pair(pairs: Sequence[T]) -> T:
    """The middle one of a peptide's residue pairs (the first of the two middle ones for an even
    count): the pair a peptide's single-pair figures use."""
    return pairs[(len(pairs) - 1) // 2]


def _central_torsions(topology: mdtraj.Topology) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(phi, psi) atom quartets of the central residue that has both; ((), ()) without a backbone."""
    pairs = backbone_pairs(topology)
    return central_pair(pairs)[1:] if pairs else ((), ())


def peptide_molecule(
    name: str, topology: app.Topology, positions: np.ndarray, spec: SystemSpec = SystemSpec(), structure: str = ""
) -> Molecule:
    """A Molecule of `topology` in `spec`'s system, `positions` in nm (any molecule, despite the name).

    The z-matrix and rigid block are `automatic_zmatrix`'s; phi and psi are those of the central
    residue (of the two central ones, the first), which the single-pair analysis reads (empty
    tuples for a molecule without a peptide backbone). Raises InputError where the force field
    does not cover a residue or the bond graph is in more than one piece.
    """
    md_topology = mdtraj.Topology.from_openmm(topology)
    try:
        z_matrix, rigid_block = automatic_zmatrix(md_topology)
    except ValueError as exc:
        raise InputError(f"{name}: no z-matrix covers it: {exc}") from None
    phi, psi = _central_torsions(md_topology)
    return Molecule(
        name=name,
        system=spec.create_system(topology),
        topology=md_topology,
        positions=np.asarray(positions, dtype=np.float64),
        z_matrix=z_matrix,
        rigid_block=rigid_block,
        phi=phi,
        psi=psi,
        spec=spec,
        structure=structure,
    )


#: Built-in peptides: name -> sequence between the ACE and NME caps. Each structure ships as
#: bgp4/simulation/resources/<name>.pdb, made by run/scripts/build_peptides.py with `build_capped_peptide`.
PEPTIDES = {"alanine-tetrapeptide": "AAA", "alanine-hexapeptide": "AAAAA"}
#: Prefix of a molecule name that is a capped-peptide sequence: "sequence:AAA" is Ace-Ala3-Nme.
SEQUENCE_PREFIX = "sequence:"
#: Prefix of the name of a molecule read from a structure file: "pdb:<file stem>".
PDB_PREFIX = "pdb:"


def _shipped_peptide(name: str, spec: SystemSpec = SystemSpec()) -> Molecule:
    """The built-in peptide `name` from its shipped structure."""
    with resources.as_file(resources.files("bgp4.simulation").joinpath("resources", f"{name}.pdb")) as path:
        pdb = app.PDBFile(str(path))
    positions = pdb.getPositions(asNumpy=True).value_in_unit(openmm.unit.nanometer)
    return peptide_molecule(name, pdb.topology, positions, spec)


@functools.lru_cache(maxsize=8)
def _built(sequence: str) -> tuple[app.Topology, np.ndarray]:
    # Built once per process: every stage that reads a data file asks for its molecule again. The
    # structure is always built in the default system; another spec only changes the MD's system.
    return build_capped_peptide(sequence)


def _sequence_peptide(name: str, spec: SystemSpec = SystemSpec()) -> Molecule:
    topology, positions = _built(name.removeprefix(SEQUENCE_PREFIX))
    return peptide_molecule(name, topology, positions.copy(), spec)


def _recorded_structure(name: str, text: str, spec: SystemSpec) -> Molecule:
    """The molecule of a structure file, from the PDB text its records carry."""
    import io

    pdb = app.PDBFile(io.StringIO(text))
    positions = pdb.getPositions(asNumpy=True).value_in_unit(openmm.unit.nanometer)
    return peptide_molecule(name, pdb.topology, positions, spec, structure=text)


def pdb_molecule(path: str | Path, spec: SystemSpec = SystemSpec()) -> Molecule:
    """The molecule of a PDB (or PDBx) file: hydrogens added where missing, minimized in `spec`'s system.

    Its name is `pdb:<file stem>`; its atoms keep the file's order. Raises InputError for a file
    OpenMM cannot read, a residue the force field does not cover, or more than one bonded piece.
    """
    path = Path(path)
    topology, positions = read_structure(path)
    prepared, minimized = prepare_structure(topology, positions, spec, label=str(path))
    return _recorded_structure(f"{PDB_PREFIX}{path.stem}", pdb_text(prepared, minimized), spec)


#: The molecule of data files that record none (plain mdtraj files, files of older versions).
DEFAULT_MOLECULE = "alanine-dipeptide"
#: Registered molecules by the name files record (and any "sequence:<codes>", built on demand).
MOLECULES: dict[str, Callable[..., Molecule]] = {
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
    if name not in MOLECULES and not name.startswith(PDB_PREFIX):
        raise InputError(f"unknown molecule {name!r}; bgp4 knows {', '.join(MOLECULES)} and {SEQUENCE_PREFIX}<SEQ>")
    return name


def get_molecule(name: str | None = None, spec: SystemSpec = SystemSpec()) -> Molecule:
    """The molecule registered as `name` (None or "": the default) in `spec`'s system; raises
    InputError for an unknown name, or a `pdb:` name (those are read with `pdb_molecule`, or from
    a record with `molecule_of`)."""
    name = molecule_name(name)
    if name.startswith(SEQUENCE_PREFIX):
        return _sequence_peptide(name, spec)
    if name.startswith(PDB_PREFIX):
        raise InputError(f"{name} was read from a structure file: give the file (--pdb) or a data file that records it")
    return MOLECULES[name](spec)


def platform_traits(name: str, pdb: str = "", spec: SystemSpec = SystemSpec()) -> tuple[int, bool]:
    """What the `auto` platform goes by (`bgp4.platform.resolve_platform`): the atoms of the
    structure file `pdb` (hydrogens added), else of the molecule registered as `name`, in `spec`'s
    system, and whether that system has custom forces; built once a process (per file version)."""
    mtime = Path(pdb).stat().st_mtime_ns if pdb else 0
    return _platform_traits(name, pdb, mtime, spec)


@functools.lru_cache(maxsize=32)
def _platform_traits(name: str, pdb: str, mtime: int, spec: SystemSpec) -> tuple[int, bool]:
    from bgp4.platform import slow_on_reference

    molecule = pdb_molecule(pdb, spec) if pdb else get_molecule(name, spec)
    return molecule.n_atoms, slow_on_reference(molecule.system)


def molecule_of(record: Mapping[str, Any] | None, n_atoms: int | None = None, source: object = "the file") -> Molecule:
    """The molecule a settings record (of a data file, run or model) names, in the system it
    records (`Molecule.record`); the default where it names none. With `n_atoms` (atoms per frame
    of the file), a mismatch raises InputError."""
    record = record or {}
    spec = SystemSpec.from_record(record)
    name = molecule_name(record.get("molecule"))
    if name.startswith(PDB_PREFIX):
        if not record.get("structure"):
            raise InputError(f"{source} names the molecule {name} but does not carry its structure")
        molecule = _recorded_structure(name, record["structure"], spec)
    else:
        molecule = get_molecule(name, spec)
    if n_atoms is not None and n_atoms != molecule.n_atoms:
        raise InputError(f"{source} has {n_atoms} atoms per frame, expected {molecule.n_atoms} ({molecule.name})")
    return molecule


def _identity(molecule: Molecule) -> dict[str, Any]:
    record = molecule.record()
    record["structure"] = hashlib.sha256(record.get("structure", "").encode()).hexdigest()[:16]
    record.pop("force_field")
    return record


def check_same_molecule(a: Molecule, b: Molecule, what: str = "the data file and the model") -> None:
    """Raise InputError unless `a` and `b` are the same molecule in the same system (name, force
    field, solvent, constraints, structure): weights mean nothing across two different targets."""
    first, second = _identity(a), _identity(b)
    differ = [k for k in first if first[k] != second.get(k)]
    if differ:
        show = ", ".join(f"{k} {first[k]} vs {second.get(k)}" for k in differ if k != "structure")
        raise InputError(f"{what} are of different molecules ({show or 'another structure'})")
