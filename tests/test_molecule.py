import numpy as np
import openmm
import pytest

from bgp4.errors import InputError
from bgp4.simulation.atoms import constrained_bonds
from bgp4.simulation.molecule import PHI, PSI, alanine_dipeptide, get_molecule, kT, molecule_of


def test_pdb_energy_matches_reference(molecule):
    context = openmm.Context(
        molecule.system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference")
    )
    context.setPositions(molecule.positions)
    energy = context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole)
    assert energy == pytest.approx(-95.70, abs=0.01)


def test_molecule_contents(molecule):
    assert molecule.n_atoms == 22
    assert molecule.positions.shape == (22, 3)
    assert molecule.topology.n_atoms == 22
    assert molecule.z_matrix.shape == (17, 4)
    assert sorted(molecule.z_matrix[:, 0].tolist() + molecule.rigid_block.tolist()) == list(range(22))
    assert molecule.system.getNumConstraints() == 12
    assert len(constrained_bonds(molecule)) == 12
    assert (molecule.phi, molecule.psi) == (PHI, PSI)
    names = [a.name for a in molecule.topology.atoms]
    assert [names[i] for i in PHI] == ["C", "N", "CA", "C"]


def test_z_matrix_references_placed_before_use(molecule):
    placed = set(molecule.rigid_block.tolist())
    for atom, *refs in molecule.z_matrix.tolist():
        assert all(r in placed for r in refs), (atom, refs)
        placed.add(atom)


def test_kT_at_600K():
    assert kT(600.0) == pytest.approx(4.98868, abs=1e-5)
    assert alanine_dipeptide().kT(300.0) == pytest.approx(kT(300.0))


def test_molecules_are_looked_up_by_the_name_files_record(molecule):
    assert get_molecule().name == get_molecule(molecule.name).name == molecule.name
    assert molecule_of({}).name == molecule.name  # plain files and older versions: the default
    assert molecule_of({"molecule": molecule.name}, n_atoms=22).n_atoms == 22
    with pytest.raises(InputError, match="unknown molecule"):
        get_molecule("benzene")
    with pytest.raises(InputError, match="21 atoms per frame, expected 22"):
        molecule_of({}, n_atoms=21, source="x.h5")


def test_rotor_hydrogens_are_the_methyl_groups_and_relabelling_keeps_the_energy(molecule, md_frames):
    from bgp4.simulation.atoms import rotor_hydrogens
    from bgp4.simulation.data import relabel_rotors

    triples = rotor_hydrogens(molecule)
    assert triples == [(0, 2, 3), (11, 12, 13), (19, 20, 21)]
    frames, energies = md_frames[0][::300], md_frames[1][::300]
    context = openmm.Context(
        molecule.system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference")
    )
    shifts = np.random.default_rng(0).integers(1, 3, size=(len(frames), len(triples)))  # never 0: every frame moves
    relabelled = relabel_rotors(frames, np.array(triples), shifts)
    assert not np.allclose(relabelled, frames)
    for x, e in zip(relabelled, energies):
        context.setPositions(x)
        again = context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole)
        assert again == pytest.approx(e, abs=1e-3)
