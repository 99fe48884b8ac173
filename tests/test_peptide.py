"""Capped peptides built from a sequence; the built-in alanine tetra- and hexapeptide; `simulate --sequence`."""

from __future__ import annotations

import mdtraj
import numpy as np
import openmm
import pytest
import torch

from bgp4.errors import InputError
from bgp4.flows import MixedCoordinateTransform
from bgp4.generator.model import build_generator
from bgp4.simulation.data import read_settings
from bgp4.simulation.molecule import PEPTIDES, get_molecule, molecule_name
from bgp4.simulation.peptide import AMINO_ACIDS, build_capped_peptide, check_sequence, place_atom
from bgp4.simulation.zmatrix import backbone_torsion_rows, torsion_row, with_automatic_zmatrix


def _energy(system: openmm.System, positions: np.ndarray) -> float:
    """Potential energy in kJ/mol (Reference platform)."""
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(positions)
    return context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole)


def _ca_handedness(topology: mdtraj.Topology, positions: np.ndarray) -> list[float]:
    """Sign of (N - CA) . ((C - CA) x (CB - CA)) of every residue with a CB: its CA's handedness."""
    signs = []
    for residue in topology.residues:
        atoms = {a.name: a.index for a in residue.atoms}
        if {"N", "CA", "C", "CB"} <= set(atoms):
            n, ca, c, cb = (positions[atoms[k]] for k in ("N", "CA", "C", "CB"))
            signs.append(float(np.sign(np.dot(n - ca, np.cross(c - ca, cb - ca)))))
    return signs


@pytest.fixture(scope="module")
def tetrapeptide():
    return get_molecule("alanine-tetrapeptide")


@pytest.fixture(scope="module")
def tetra_frames(tetrapeptide, langevin):
    """200 frames of 600 K Langevin MD of the tetrapeptide (Reference platform), (200, 42, 3) float64 nm."""
    return langevin(tetrapeptide, seed=4321, n=200, every=5, equilibrate=500, minimize=False)[0]


@pytest.fixture(scope="module")
def peptide_frames(tetrapeptide, tetra_frames, langevin):
    """Each built-in peptide and 200 frames of its 600 K Langevin MD, (200, n_atoms, 3) float64 nm."""
    hexapeptide = get_molecule("alanine-hexapeptide")
    hexa = langevin(hexapeptide, seed=8765, n=200, every=5, equilibrate=500, minimize=False)[0]
    return {"alanine-tetrapeptide": (tetrapeptide, tetra_frames), "alanine-hexapeptide": (hexapeptide, hexa)}


def test_nerf_places_bond_angle_and_torsion():
    a, b, c = np.array([0.0, 1.0, 0.0]), np.zeros(3), np.array([1.0, 0.0, 0.0])
    d = place_atom(a, b, c, 0.15, np.radians(110.0), np.radians(60.0))
    top = mdtraj.Topology()
    residue = top.add_residue("X", top.add_chain())
    for _ in range(4):
        top.add_atom("C", mdtraj.element.carbon, residue)
    traj = mdtraj.Trajectory(np.array([a, b, c, d])[None], top)
    assert np.linalg.norm(d - c) == pytest.approx(0.15)
    assert np.degrees(mdtraj.compute_angles(traj, [[1, 2, 3]])[0, 0]) == pytest.approx(110.0, abs=1e-3)
    assert np.degrees(mdtraj.compute_dihedrals(traj, [[0, 1, 2, 3]])[0, 0]) == pytest.approx(60.0, abs=1e-3)


@pytest.mark.parametrize(
    ("name", "n_atoms", "n_residues"), [("alanine-tetrapeptide", 42, 5), ("alanine-hexapeptide", 62, 7)]
)
def test_built_in_peptides(molecule, name, n_atoms, n_residues):
    peptide = get_molecule(name)
    assert peptide.name == name and peptide.n_atoms == n_atoms == peptide.topology.n_atoms
    assert peptide.topology.n_residues == n_residues
    assert [r.name for r in peptide.topology.residues] == ["ACE", *["ALA"] * (n_residues - 2), "NME"]
    n_hydrogens = sum(a.element.symbol == "H" for a in peptide.topology.atoms)
    assert peptide.system.getNumConstraints() == n_hydrogens == (n_atoms + 2) // 2  # every X-H bond: 22 and 32
    energy = _energy(peptide.system, peptide.positions)
    assert np.isfinite(energy) and energy < 0.0  # minimized: -110 and -87 kJ/mol
    # L-alanines: every CA has the handedness of alanine dipeptide's.
    reference = _ca_handedness(molecule.topology, molecule.positions)
    assert _ca_handedness(peptide.topology, peptide.positions) == reference * (n_residues - 2)
    # The automatic z-matrix, with phi and psi of the central residue as z-matrix torsions.
    assert sorted(peptide.z_matrix[:, 0].tolist() + peptide.rigid_block.tolist()) == list(range(n_atoms))
    central = peptide.topology.atom(peptide.phi[2]).residue
    assert central.index == n_residues // 2 and peptide.topology.atom(peptide.psi[1]).residue is central
    assert [peptide.topology.atom(i).name for i in peptide.phi] == ["C", "N", "CA", "C"]
    assert [peptide.topology.atom(i).name for i in peptide.psi] == ["N", "CA", "C", "N"]
    assert (
        torsion_row(peptide.z_matrix, peptide.phi) is not None
        and torsion_row(peptide.z_matrix, peptide.psi) is not None
    )
    rows = backbone_torsion_rows(peptide.topology, peptide.z_matrix)
    assert all(None not in rows[kind] for kind in ("phi", "psi"))


def test_a_short_build(molecule):
    topology, positions = build_capped_peptide("GS")
    assert [r.name for r in topology.residues()] == ["ACE", "GLY", "SER", "NME"]
    assert positions.shape == (topology.getNumAtoms(), 3) == (30, 3)
    assert _ca_handedness(mdtraj.Topology.from_openmm(topology), positions) == [1.0]  # SER (GLY has no CB)


def test_sequence_names(tetrapeptide):
    assert molecule_name("sequence:aaa") == "sequence:AAA"
    built = get_molecule("sequence:AAA")
    assert built.name == "sequence:AAA"
    assert [(a.residue.name, a.name) for a in built.topology.atoms] == [
        (a.residue.name, a.name) for a in tetrapeptide.topology.atoms
    ]
    assert {tuple(sorted((a.index, b.index))) for a, b in built.topology.bonds} == {
        tuple(sorted((a.index, b.index))) for a, b in tetrapeptide.topology.bonds
    }
    assert (built.z_matrix == tetrapeptide.z_matrix).all() and (built.rigid_block == tetrapeptide.rigid_block).all()
    assert (built.phi, built.psi) == (tetrapeptide.phi, tetrapeptide.psi)
    # The shipped structure is this build, to the PDB format's precision (0.001 A = 1e-4 nm, rounded to
    # half of it; run/scripts/build_peptides.py).
    assert np.abs(built.positions - tetrapeptide.positions).max() < 6e-5
    for bad in ("sequence:AZA", "sequence:", "sequence:A1"):
        with pytest.raises(InputError):
            molecule_name(bad)
    with pytest.raises(InputError, match="'Z' is no amino acid"):
        check_sequence("AZA")


def test_sequences_in_three_letter_codes():
    """Separated codes may be one- or three-letter, any case; a lone three-letter code is refused as
    ambiguous rather than read as three residues."""
    assert check_sequence("Ala-Gly-Ser") == check_sequence("ALA GLY,ser") == check_sequence("a-g-S") == "AGS"
    assert check_sequence("aaa") == "AAA"
    assert molecule_name("sequence:Ala-Ala-Ala") == "sequence:AAA"
    for lone in ("ala", "GLY", "Trp"):
        with pytest.raises(InputError, match="ambiguous"):
            check_sequence(lone)
    with pytest.raises(InputError, match="'XYZ' is no amino acid"):
        check_sequence("Ala-Xyz")


@pytest.mark.slow
def test_every_standard_amino_acid_builds(molecule):
    """All 20 residues match amber99sb-ildn's templates; L-handed, finite and low energy after the minimization."""
    sequence = "".join(AMINO_ACIDS)
    peptide = get_molecule("sequence:" + sequence)
    md_topology, positions = peptide.topology, peptide.positions
    assert [r.name for r in md_topology.residues][1:-1] == [
        {"HIS": r.name}.get(AMINO_ACIDS[c], AMINO_ACIDS[c]) for c, r in zip(sequence, list(md_topology.residues)[1:-1])
    ]  # HIS becomes HID, HIE or HIP as addHydrogens protonates it
    energy = _energy(peptide.system, positions)
    assert np.isfinite(energy) and energy < 0.0
    assert set(_ca_handedness(md_topology, positions)) == set(_ca_handedness(molecule.topology, molecule.positions))
    # THR and ILE have their natural CB: the chi1 atom at +120 degrees from CG2 about CA-CB.
    traj = mdtraj.Trajectory(positions[None], md_topology)
    for residue in md_topology.residues:
        if residue.name in ("THR", "ILE"):
            atoms = {a.name: a.index for a in residue.atoms}
            chi1 = atoms["OG1" if residue.name == "THR" else "CG1"]
            quartets = [[atoms["N"], atoms["CA"], atoms["CB"], i] for i in (chi1, atoms["CG2"])]
            first, second = np.degrees(mdtraj.compute_dihedrals(traj, quartets)[0])
            assert (first - second) % 360.0 == pytest.approx(120.0, abs=25.0)


def test_without_fixed_bonds_every_constrained_bond_is_a_flow_dimension(tetrapeptide):
    # with them fixed: test_system.py's test_flow_dims_are_3n_minus_6_less_the_fixed_constraints
    assert MixedCoordinateTransform.shell(tetrapeptide, fix_constrained=False).n_dims == 3 * 42 - 6


@pytest.mark.parametrize("name", PEPTIDES)
@pytest.mark.parametrize("torsions", ["circular", "logit"])
def test_round_trip_on_md_frames(peptide_frames, name, torsions):
    peptide, frames = peptide_frames[name]
    x = torch.as_tensor(frames)
    transform = MixedCoordinateTransform.fit(x, peptide, fix_constrained=True, torsions=torsions)
    back, _ = transform.to_cartesian(transform.from_cartesian(x)[0])
    assert float((back - transform.superpose(x)).norm(dim=-1).max()) < 1e-5


@pytest.mark.parametrize("name", PEPTIDES)
def test_flow_backbone_torsions_are_mdtrajs(peptide_frames, name):
    """The flow's coordinates of every residue's phi and psi, decoded, are mdtraj's dihedrals of the frames."""
    peptide, frames = peptide_frames[name]
    transform = MixedCoordinateTransform.fit(torch.as_tensor(frames), peptide, torsions="circular")
    torsions = transform._unnormalize(transform.from_cartesian(frames)[0])[2].numpy()
    rows = backbone_torsion_rows(peptide.topology, peptide.z_matrix)
    trajectory = mdtraj.Trajectory(frames, peptide.topology)
    for kind, compute in (("phi", mdtraj.compute_phi), ("psi", mdtraj.compute_psi)):
        reference = compute(trajectory)[1]
        assert reference.shape[1] == len(rows[kind]) == peptide.topology.n_residues - 2
        ours = torsions[:, rows[kind]]
        assert np.abs(np.angle(np.exp(1j * (ours - reference)))).max() < 1e-4  # float32 frames in mdtraj
        assert np.ptp(reference, axis=0).min() > 0.3  # 600 K MD moved every one of them


@pytest.mark.slow
def test_simulate_the_tetrapeptide(cli, tmp_path):
    out = tmp_path / "tetra.h5"
    args = ("--frames", 200, "--equilibration-ps", 1, "--replicas", 1, "--quiet", "--out", out)
    result = cli("simulate", "--molecule", "alanine-tetrapeptide", *args)
    assert result.returncode == 0, result.stderr
    traj = mdtraj.load(str(out))
    assert traj.n_frames == 200 and traj.n_atoms == 42
    assert read_settings(out)["molecule"] == "alanine-tetrapeptide"


def test_simulate_refuses_bad_sequences(cli, tmp_path):
    out = tmp_path / "x.h5"
    result = cli("simulate", "--sequence", "AZA", "--frames", 10, "--out", out)
    assert result.returncode == 2 and "'Z' is no amino acid" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = cli("simulate", "--sequence", "AAA", "--molecule", "alanine-dipeptide", "--frames", 10, "--out", out)
    assert result.returncode == 2 and "only one of" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_peptides_ship_in_the_package():
    from importlib import resources

    for name in PEPTIDES:
        assert resources.files("bgp4.simulation").joinpath("resources", f"{name}.pdb").is_file()


@pytest.mark.slow
def test_tetrapeptide_end_to_end(cli, tmp_path):
    """simulate -> train (a few steps) -> sample -> analyze on the tetrapeptide: every stage finds its molecule."""
    data, run, report = tmp_path / "tetra.h5", tmp_path / "run", tmp_path / "report"
    md = ("--frames", 400, "--equilibration-ps", 1, "--replicas", 1, "--quiet", "--out", data)
    assert cli("simulate", "--sequence", "AAA", *md).returncode == 0
    tiny = ("--steps", 20, "--energy-steps", 2, "--blocks", 1, "--hidden", 16, "--batch", 32, "--eval-every", 10)
    result = cli("train", "--data", data, "--out", run, *tiny, "--workers", 1, "--quiet")
    assert result.returncode == 0, result.stderr
    result = cli("sample", run, "--n", 64, "--workers", 1, "--refine", 0, "--quiet")
    assert result.returncode == 0, result.stderr
    assert mdtraj.load(str(run / "samples.h5")).n_atoms == 42
    result = cli("analyze", run, "--data", data, "--out", report, "--workers", 1)
    assert result.returncode == 0, result.stderr
    assert (report / "ramachandran.png").is_file()


def _handedness(xyz: np.ndarray, topology) -> np.ndarray:
    """(n_frames, n_CA) sign of (N - CA) x (C - CA) . (CB - CA): +1 or -1 for each CA with a CB."""
    signs = []
    for residue in topology.residues:
        atoms = {a.name: a.index for a in residue.atoms}
        if {"N", "CA", "C", "CB"} <= set(atoms):
            ca = xyz[:, atoms["CA"]]
            arms = [xyz[:, atoms[n]] - ca for n in ("N", "C", "CB")]
            signs.append(np.sign(np.einsum("ij,ij->i", np.cross(arms[0], arms[1]), arms[2])))
    return np.stack(signs, axis=1)


def test_every_stereocentre_is_fixed_by_an_improper_torsion_or_the_block():
    for name in ("alanine-dipeptide", *PEPTIDES):
        molecule = with_automatic_zmatrix(get_molecule(name))
        neighbours = {a.index: set() for a in molecule.topology.atoms}
        for a, b in molecule.topology.bonds:
            neighbours[a.index].add(b.index)
            neighbours[b.index].add(a.index)
        block = set(molecule.rigid_block.tolist())
        for atom in (a for a in neighbours if len(neighbours[a]) == 4 and a not in block):
            rows = [r for r in molecule.z_matrix.tolist() if r[1] == atom]
            assert any(r[3] in neighbours[atom] for r in rows), (name, atom)


@pytest.mark.parametrize(  # circular and logit torsions
    ("name", "kind"),
    [
        ("alanine-tetrapeptide", "spline"),
        ("alanine-tetrapeptide", "p4inv"),
        pytest.param("alanine-hexapeptide", "spline", marks=pytest.mark.slow),
    ],
)
def test_generator_samples_keep_the_chirality_of_every_ca(peptide_frames, name, kind):
    peptide, frames = peptide_frames[name]
    x = torch.as_tensor(frames)
    reference = _handedness(frames, peptide.topology)
    assert (reference == reference[0]).all()  # MD keeps it: L-alanines throughout
    torch.manual_seed(0)
    model = build_generator(kind, x, molecule=peptide, blocks=1, hidden=16)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(5):
        loss = model.nll(x[:32]).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        drawn = model.sample(1000, generator=torch.Generator().manual_seed(1))
    xyz = drawn.x.reshape(1000, -1, 3).double().numpy()
    assert (_handedness(xyz, peptide.topology) == reference[0]).all()


def test_rotor_hydrogens_of_the_tetrapeptide_and_relabelling_keeps_the_energy(tetrapeptide, tetra_frames):
    """Five methyl groups (two caps, three alanine side chains); swapping their hydrogens round is a symmetry."""
    from bgp4.simulation.atoms import rotor_hydrogens
    from bgp4.simulation.data import relabel_rotors

    triples = rotor_hydrogens(tetrapeptide)
    atoms = list(tetrapeptide.topology.atoms)
    assert len(triples) == 5
    for triple in triples:
        carbons = {n.index for h in triple for n in _bonded(tetrapeptide, h)}  # each H's one bonded atom
        assert len(carbons) == 1 and atoms[carbons.pop()].element.symbol == "C"
        assert all(atoms[h].element.symbol == "H" for h in triple)
    assert sorted(atoms[triple[0]].residue.name for triple in triples) == ["ACE", "ALA", "ALA", "ALA", "NME"]
    frames = tetra_frames[::20]
    shifts = np.random.default_rng(1).integers(1, 3, size=(len(frames), len(triples)))
    relabelled = relabel_rotors(frames, np.array(triples), shifts)
    assert not np.allclose(relabelled, frames)
    for x, y in zip(frames, relabelled):
        assert _energy(tetrapeptide.system, y) == pytest.approx(_energy(tetrapeptide.system, x), abs=1e-3)


def _bonded(molecule, atom: int) -> list:
    """The atoms bonded to `atom` (mdtraj Atom objects)."""
    return [b if a.index == atom else a for a, b in molecule.topology.bonds if atom in (a.index, b.index)]
