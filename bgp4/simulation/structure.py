"""Structures made ready for MD: hydrogens added, the force field checked, the energy minimized.

`prepare_structure` serves both the peptides bgp4 builds from a sequence and the PDB files users
bring (`read_structure`). It keeps the atom order of its input (OpenMM appends the hydrogens it
adds to their residue), so any atom order and any hydrogen naming that OpenMM's PDB reader knows
work. Nothing is downloaded.

Units: positions in nm, energies in kJ/mol.
"""

from __future__ import annotations

import random
from pathlib import Path

import networkx as nx
import numpy as np
import openmm
import openmm.app as app

from bgp4.errors import InputError, first_line
from bgp4.simulation.system import SystemSpec, force_field

__all__ = [
    "MAX_ENERGY_PER_ATOM",
    "MAX_BOND_NM",
    "read_structure",
    "add_hydrogens",
    "minimize",
    "prepare_structure",
    "pdb_text",
]

#: Largest accepted energy per atom of a minimized structure, kJ/mol (alanine dipeptide: -4.4).
MAX_ENERGY_PER_ATOM = 20.0
#: Longest accepted bond in a structure file, nm (covalent bonds are under 0.21 nm, S-S the longest).
MAX_BOND_NM = 0.3


def read_structure(path: str | Path) -> tuple[app.Topology, np.ndarray]:
    """Topology and positions (n_atoms, 3) nm of a PDB (or PDBx/mmCIF) file; InputError if unreadable."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"no structure file at {path} (--pdb)")
    reader = app.PDBxFile if path.suffix.lower() in (".cif", ".pdbx") else app.PDBFile
    try:
        structure = reader(str(path))
        positions = structure.getPositions(asNumpy=True).value_in_unit(openmm.unit.nanometer)
    except Exception as exc:  # noqa: BLE001 - any reader failure means "not a structure OpenMM reads"
        raise InputError(f"{path} is no structure file OpenMM reads ({first_line(exc, 1000)})") from None
    if structure.topology.getNumAtoms() == 0:
        raise InputError(f"{path} holds no atoms")
    return structure.topology, np.asarray(positions, dtype=np.float64)


def add_hydrogens(modeller: app.Modeller, files: tuple[str, ...]) -> None:
    """`modeller.addHydrogens` (the missing ones only) made reproducible.

    OpenMM starts the new hydrogens at positions drawn from Python's global `random` (seeded here,
    and its state put back afterwards) and relaxes them on the Reference platform, whose sums do
    not depend on the number of threads.
    """
    state = random.getstate()
    random.seed(0)
    try:
        modeller.addHydrogens(force_field(files), pH=7.0, platform=openmm.Platform.getPlatformByName("Reference"))
    finally:
        random.setstate(state)


def minimize(system: openmm.System, positions: np.ndarray) -> tuple[np.ndarray, float]:
    """Locally minimized positions (nm) and their potential energy (kJ/mol), on the Reference platform."""
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(positions)
    context.applyConstraints(1e-8)
    openmm.LocalEnergyMinimizer.minimize(context, 1.0, 0)
    state = context.getState(getPositions=True, getEnergy=True)
    out = state.getPositions(asNumpy=True).value_in_unit(openmm.unit.nanometer)
    return np.asarray(out, dtype=np.float64), state.getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole)


def _check_residues(topology: app.Topology, spec: SystemSpec, label: str) -> None:
    """Refuse residues whose names neither the force field's templates nor OpenMM's hydrogen
    definitions know (without hydrogens and bonds they would show up only as loose pieces)."""
    app.Modeller._loadStandardHydrogenDefinitions()  # OpenMM's own table, loaded once per process
    known = set(force_field(SystemSpec(spec.forcefield).files())._templates) | set(app.Modeller._residueHydrogens)
    unknown = sorted({f"{r.name} {r.id}" for r in topology.residues() if r.name not in known})
    if unknown:
        raise InputError(
            f"{label}: the force field {spec.forcefield} does not cover the residue(s) {', '.join(unknown[:5])}"
        )


def _check_connected(topology: app.Topology, label: str) -> None:
    graph = nx.Graph()
    graph.add_nodes_from(range(topology.getNumAtoms()))
    graph.add_edges_from((a.index, b.index) for a, b in topology.bonds())
    if not nx.is_connected(graph):
        pieces = sorted(nx.connected_components(graph), key=len)
        atom = next(a for a in topology.atoms() if a.index == min(pieces[0]))
        raise InputError(
            f"{label} is in {len(pieces)} pieces (the smallest holds {len(pieces[0])} atom(s), from "
            f"{atom.residue.name} {atom.residue.id}): one z-matrix covers one bonded molecule, without ions or water "
            "(OpenMM bonds a chain's residues in file order: list them in chain order)"
        )


def _check_bond_lengths(topology: app.Topology, positions: np.ndarray, label: str) -> None:
    """Refuse a bond far longer than any covalent bond: residues out of chain order in the file,
    which OpenMM bonds in file order, are otherwise taken with wrong bonds."""
    pairs = np.array([(a.index, b.index) for a, b in topology.bonds()], dtype=int).reshape(-1, 2)
    lengths = np.linalg.norm(positions[pairs[:, 0]] - positions[pairs[:, 1]], axis=-1)
    if len(lengths) and lengths.max() > MAX_BOND_NM:
        atoms = list(topology.atoms())
        a, b = (atoms[i] for i in pairs[lengths.argmax()])
        raise InputError(
            f"{label}: the bond {a.residue.name} {a.residue.id} {a.name} - {b.residue.name} {b.residue.id} {b.name} "
            f"is {lengths.max():.2f} nm long (OpenMM bonds a chain's residues in file order: list them in chain order)"
        )


def prepare_structure(
    topology: app.Topology, positions: np.ndarray, spec: SystemSpec = SystemSpec(), label: str = "the structure"
) -> tuple[app.Topology, np.ndarray]:
    """`topology` with the hydrogens it lacks and minimized positions (n_atoms, 3) in nm, in `spec`'s system.

    Raises InputError where the force field does not cover a residue, the molecule is not one bonded
    piece, a bond is longer than `MAX_BOND_NM`, or the minimized energy is not finite and low
    (`label` names the structure in messages).
    """
    _check_residues(topology, spec, label)
    _check_connected(topology, label)  # before OpenMM's templates, whose errors would not say why
    _check_bond_lengths(topology, np.asarray(positions, dtype=np.float64), label)
    modeller = app.Modeller(topology, np.asarray(positions) * openmm.unit.nanometer)
    try:
        add_hydrogens(modeller, SystemSpec(spec.forcefield).files())
    except ValueError as exc:  # OpenMM: "No template found for residue ..." / unknown residue
        raise InputError(f"{label}: the force field {spec.forcefield} does not cover it: {exc}") from None
    system = spec.create_system(modeller.topology)
    start = np.asarray(modeller.getPositions().value_in_unit(openmm.unit.nanometer), dtype=np.float64)
    out, energy = minimize(system, start)
    if not np.isfinite(energy) or energy > MAX_ENERGY_PER_ATOM * len(out):
        raise InputError(f"{label}: the minimized energy {energy:.1f} kJ/mol is too high (clashing atoms?)")
    return modeller.topology, out


def pdb_text(topology: app.Topology, positions: np.ndarray) -> str:
    """The structure as PDB text (positions in nm; the file format's 1e-4 nm resolution), bonds included."""
    import io

    buffer = io.StringIO()
    app.PDBFile.writeFile(topology, np.asarray(positions) * 10.0 * openmm.unit.angstrom, buffer, keepIds=True)
    return buffer.getvalue()
