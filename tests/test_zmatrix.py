"""Automatic z-matrix from the bond graph: validity, backbone torsions, round trips, flow dims, atom order."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import mdtraj
import numpy as np
import openmm
import openmm.app as app
import pytest
import torch

from bgp4.flows import MixedCoordinateTransform
from bgp4.simulation.atoms import constrained_bonds
from bgp4.simulation.molecule import PHI, PSI, pdb_molecule
from bgp4.simulation.zmatrix import automatic_zmatrix, backbone_torsion_rows, torsion_row, with_automatic_zmatrix


@pytest.fixture(scope="module")
def auto(molecule):
    return with_automatic_zmatrix(molecule)


@pytest.fixture(scope="module")
def frames(molecule):
    """64 frames (64, 22, 3) nm: the structure with 0.005 nm noise, the HBonds constraints then applied."""
    context = openmm.Context(
        molecule.system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference")
    )
    rng = np.random.default_rng(7)
    out = []
    for _ in range(64):
        context.setPositions(molecule.positions + rng.normal(0.0, 0.005, molecule.positions.shape))
        context.applyConstraints(1e-8)
        out.append(context.getState(getPositions=True).getPositions(asNumpy=True).value_in_unit(openmm.unit.nanometer))
    return torch.as_tensor(np.asarray(out), dtype=torch.float64)


def _max_round_trip_error(transform: MixedCoordinateTransform, x: torch.Tensor) -> float:
    """Largest atom displacement (nm) between superposed frames and their image through flow coordinates."""
    back, _ = transform.to_cartesian(transform.from_cartesian(x)[0])
    return float((back - transform.superpose(x)).norm(dim=-1).max())


def _check_layout(topology: mdtraj.Topology, z_matrix: np.ndarray, block: np.ndarray) -> None:
    assert sorted(z_matrix[:, 0].tolist() + block.tolist()) == list(range(topology.n_atoms))
    placed = set(block.tolist())
    bonded = {frozenset((a.index, b.index)) for a, b in topology.bonds}
    for atom, bond, angle, torsion in z_matrix.tolist():
        assert {bond, angle, torsion} <= placed and len({atom, bond, angle, torsion}) == 4
        assert frozenset((atom, bond)) in bonded and frozenset((bond, angle)) in bonded
        placed.add(atom)
    for atom, bond, *_ in z_matrix.tolist():
        if topology.atom(atom).element.symbol == "H":
            assert topology.atom(bond).element.symbol != "H"  # a hydrogen hangs on its own heavy atom


def test_alanine_dipeptide_layout(molecule, auto):
    _check_layout(molecule.topology, auto.z_matrix, auto.rigid_block)
    assert auto.rigid_block.tolist() == [6, 8, 10, 14]  # N, CA, CB, C of the alanine
    assert torsion_row(auto.z_matrix, PHI) is not None and torsion_row(auto.z_matrix, PSI) is not None
    assert backbone_torsion_rows(molecule.topology, auto.z_matrix)["phi"] == [torsion_row(auto.z_matrix, PHI)]
    assert backbone_torsion_rows(molecule.topology, auto.z_matrix)["psi"] == [torsion_row(auto.z_matrix, PSI)]
    for omega in ((1, 4, 6, 8), (8, 14, 16, 18)):  # the caps' omegas (mdtraj names no CA there)
        assert torsion_row(auto.z_matrix, omega) is not None
    # The default molecule keeps its hand-written z-matrix.
    assert molecule.z_matrix.shape == (17, 4) and molecule.rigid_block.tolist() == [6, 8, 9, 10, 14]


@pytest.mark.parametrize("fix_constrained", [False, True])
def test_flow_dims_match_the_hand_written(molecule, auto, fix_constrained):
    hand = MixedCoordinateTransform.shell(molecule, fix_constrained=fix_constrained)
    mine = MixedCoordinateTransform.shell(auto, fix_constrained=fix_constrained)
    n_constraints = len(constrained_bonds(molecule)) if fix_constrained else 0
    assert mine.n_dims == hand.n_dims == 3 * molecule.n_atoms - 6 - n_constraints
    if fix_constrained:
        assert mine.free_constrained_pairs(constrained_bonds(molecule)) == []
    assert len(mine.fixed_rows) == n_constraints


@pytest.mark.parametrize("torsions", ["logit", "circular"])
def test_round_trip_with_constraints_fixed(auto, frames, torsions):
    transform = MixedCoordinateTransform.fit(frames, auto, fix_constrained=True, torsions=torsions)
    assert _max_round_trip_error(transform, frames) < 1e-5


def test_round_trip_on_md_frames(molecule, auto, md_frames):
    x = torch.as_tensor(md_frames[0][::10])
    transform = MixedCoordinateTransform.fit(x, auto, fix_constrained=True, torsions="circular")
    assert _max_round_trip_error(transform, x) < 1e-5
    # phi and psi are circular (or not) in the spline kinds just as with the hand-written z-matrix.
    hand = MixedCoordinateTransform.fit(x, molecule, fix_constrained=True, torsions="circular")
    for quartet in (PHI, PSI):
        mine, theirs = torsion_row(auto.z_matrix, quartet), torsion_row(np.asarray(hand.z_matrix), quartet)
        assert transform.torsion_circular[mine] == hand.torsion_circular[theirs]


def _permuted_topology(topology: mdtraj.Topology, order: np.ndarray) -> mdtraj.Topology:
    """`topology` with its atoms in `order` (new atom i is old atom order[i]; residues keep their order)."""
    new, index = mdtraj.Topology(), {}
    for chain in topology.chains:
        new_chain = new.add_chain()
        for residue in chain.residues:
            new_residue = new.add_residue(residue.name, new_chain, residue.resSeq)
            for old in order:
                atom = topology.atom(int(old))
                if atom.residue is residue:
                    index[atom.index] = new.add_atom(atom.name, atom.element, new_residue).index
    for a, b in topology.bonds:
        new.add_bond(new.atom(index[a.index]), new.atom(index[b.index]))
    return new


def test_pdb_file_in_another_atom_order(molecule, auto, md_frames, tmp_path):
    rng = np.random.default_rng(3)
    order = np.concatenate([rng.permutation([a.index for a in r.atoms]) for r in molecule.topology.residues])
    path = tmp_path / "shuffled.pdb"
    traj = mdtraj.Trajectory(molecule.positions[order][None], _permuted_topology(molecule.topology, order))
    traj.save_pdb(str(path))
    shuffled = pdb_molecule(path)  # what `bgp4 simulate --pdb` reads: the file's atom order kept
    topology = shuffled.topology
    assert shuffled.name == "pdb:shuffled" and shuffled.system.getNumConstraints() == 12
    assert [a.name for a in topology.atoms] == [molecule.topology.atom(int(i)).name for i in order]
    _check_layout(topology, shuffled.z_matrix, shuffled.rigid_block)
    # The same rows as for bgp4's order, relabelled: new index of old atom i is position[i].
    position = np.argsort(order)
    assert (shuffled.z_matrix == position[auto.z_matrix]).all()
    assert sorted(shuffled.rigid_block.tolist()) == sorted(position[auto.rigid_block].tolist())
    x = torch.as_tensor(md_frames[0][::30][:, order])  # 100 frames of 600 K MD, in the file's order
    transform = MixedCoordinateTransform.fit(x, shuffled, fix_constrained=True)
    assert _max_round_trip_error(transform, x) < 1e-5


def test_mirror_image_flips_the_stereocentre_torsion(auto, frames):
    """The CA stereocentre's hydrogen is placed by an improper-style torsion: its sign is the handedness.

    The data hold one sign only; a reflected frame has the other one, far out in the fitted flow
    coordinate (the flow could still put mass there, but it is not where training puts it).
    """
    row = next(i for i, r in enumerate(auto.z_matrix.tolist()) if r[0] == 9)  # HA on CA (8)
    assert auto.z_matrix[row, 1] == 8 and auto.z_matrix[row, 3] in (6, 10, 14)  # a sibling on CA
    transform = MixedCoordinateTransform.fit(frames, auto, fix_constrained=True)
    mirror = frames * torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64)
    torsion = transform.internal_coordinates(frames)[2][:, row]
    assert (torch.sign(torsion) == torch.sign(torsion[0])).all() and torsion.abs().min() > 1.0
    assert torch.allclose(transform.internal_coordinates(mirror)[2][:, row], -torsion)
    column = transform.n_free_bonds + transform.n_ic + row  # this row's torsion coordinate
    y, y_mirror = transform.from_cartesian(frames)[0][:, column], transform.from_cartesian(mirror)[0][:, column]
    assert y_mirror.abs().min() > 5 * y.abs().max()


def test_automatic_zmatrix_rejects_unusable_graphs():
    top = mdtraj.Topology()
    residue = top.add_residue("X", top.add_chain())
    for name in ("C1", "C2", "C3", "C4"):
        top.add_atom(name, mdtraj.element.carbon, residue)
    top.add_bond(top.atom(0), top.atom(1))
    top.add_bond(top.atom(1), top.atom(2))
    with pytest.raises(ValueError, match="more than one piece"):
        automatic_zmatrix(top)
    top.add_bond(top.atom(2), top.atom(3))
    z_matrix, block = automatic_zmatrix(top)  # butane's skeleton: a 3-atom block and one row
    _check_layout(top, z_matrix, block)
    assert len(block) == 3 and len(z_matrix) == 1


@pytest.mark.slow
def test_protein_backbone_torsions_are_rows(molecule):
    """A 35-residue protein (OpenMM's test.pdb, chain 0): every phi, psi and omega is a z-matrix torsion."""
    traj = mdtraj.load(str(Path(app.__file__).parent / "data" / "test.pdb"))
    traj = traj.atom_slice(traj.topology.select("protein and chainid 0"))
    z_matrix, block = automatic_zmatrix(traj.topology)
    _check_layout(traj.topology, z_matrix, block)
    assert [traj.topology.atom(int(i)).name for i in block] == ["N", "CA", "CB", "C"]
    rows = backbone_torsion_rows(traj.topology, z_matrix)
    assert all(len(rows[name]) == 34 and None not in rows[name] for name in ("phi", "psi", "omega"))
    x0 = traj.xyz[0].astype(np.float64)
    x = torch.as_tensor(x0 + np.random.default_rng(5).normal(0.0, 0.002, (20, *x0.shape)))
    # A stand-in Molecule: without fix_constrained only the topology, positions and layout are read.
    protein = dataclasses.replace(molecule, topology=traj.topology, positions=x0, z_matrix=z_matrix, rigid_block=block)
    assert _max_round_trip_error(MixedCoordinateTransform.fit(x, protein), x) < 1e-5
