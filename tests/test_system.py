"""The system choices (force field, solvent, constraints) and molecules read from structure files."""

import json

import mdtraj
import numpy as np
import openmm
import pytest

from bgp4.errors import InputError
from bgp4.flows import MixedCoordinateTransform
from bgp4.simulation.atoms import constrained_bonds
from bgp4.simulation.data import read_settings
from bgp4.simulation.md import MDSettings, _differing
from bgp4.simulation.molecule import check_same_molecule, get_molecule, molecule_of, pdb_molecule
from bgp4.simulation.system import SystemSpec

DIPEPTIDE_PDB = "bgp4/simulation/resources/alanine-dipeptide.pdb"
TETRAPEPTIDE_PDB = "bgp4/simulation/resources/alanine-tetrapeptide.pdb"


def _energies(system, frames) -> np.ndarray:
    """Potential energies (n,) kJ/mol of frames (n, atoms, 3) nm (Reference platform)."""
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    out = []
    for x in frames:
        context.setPositions(x)
        out.append(context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole))
    return np.asarray(out)


def _energy(molecule) -> float:
    return float(_energies(molecule.system, [molecule.positions])[0])


def test_spec_validates_and_round_trips_through_a_record():
    spec = SystemSpec("AMBER14", "Vacuum", "None")
    assert (spec.forcefield, spec.solvent, spec.constraints) == ("amber14", "vacuum", "none")
    assert spec.files() == ("amber14-all.xml",)
    assert SystemSpec.from_record(spec.record()) == spec
    assert SystemSpec.from_record({}) == SystemSpec()  # records of older versions
    for bad in ({"forcefield": "charmm"}, {"solvent": "water"}, {"constraints": "allbonds"}):
        with pytest.raises(InputError, match=next(iter(bad))):
            SystemSpec(**bad)


def test_solvent_and_constraints_change_the_system():
    default = get_molecule()
    free = get_molecule(None, SystemSpec(constraints="none"))
    vacuum = get_molecule(None, SystemSpec(solvent="vacuum"))
    assert default.system.getNumConstraints() == 12 and free.system.getNumConstraints() == 0
    assert not any(isinstance(f, openmm.GBSAOBCForce) for f in vacuum.system.getForces())
    # Free X-H bonds add their (near-zero at this structure) stretch terms; vacuum loses the solvation energy.
    assert _energy(free) == pytest.approx(_energy(default), abs=0.01)
    assert _energy(vacuum) - _energy(default) > 20.0
    assert molecule_of(free.record()).system.getNumConstraints() == 0


def test_amber96_is_the_published_tables_dipeptide(md_frames):
    """--forcefield amber96 --constraints none is openmmtools' AlanineDipeptideImplicit(constraints=None)
    (ff96 with OBC1 from a prmtop file, the FAB, TA-BG and CMT dipeptide target), frame by frame."""
    from openmmtools.testsystems import AlanineDipeptideImplicit

    ours = get_molecule(None, SystemSpec("amber96", constraints="none"))
    theirs = AlanineDipeptideImplicit(constraints=None)
    assert [a.name for a in theirs.topology.atoms()] == [a.name for a in ours.topology.atoms]
    frames = md_frames[0][::300]
    np.testing.assert_allclose(_energies(ours.system, frames), _energies(theirs.system, frames), rtol=0, atol=1e-3)
    # the default system is another Hamiltonian, not a shift of this one
    default = get_molecule(None, SystemSpec(constraints="none"))
    assert np.ptp(_energies(default.system, frames) - _energies(ours.system, frames)) > 5.0


def test_the_default_tetrapeptide_is_the_one_ta_bgs_code_builds(langevin):
    """bgp4's tetrapeptide with its defaults (X-H bonds held) has the force field and options of TA-BG's
    released code, bgmol's MiniPeptide("AAA"): amber99sbildn.xml + amber99_obc.xml, NoCutoff, HBonds
    (built here on bgp4's topology); 98 flow dims."""
    ours = get_molecule("alanine-tetrapeptide")
    forcefield = openmm.app.ForceField("amber99sbildn.xml", "amber99_obc.xml")
    options = dict(nonbondedMethod=openmm.app.NoCutoff, constraints=openmm.app.HBonds)
    theirs = forcefield.createSystem(ours.topology.to_openmm(), **options)

    def pairs(system):
        return sorted(tuple(sorted(system.getConstraintParameters(i)[:2])) for i in range(system.getNumConstraints()))

    assert pairs(theirs) == pairs(ours.system)
    assert len(pairs(ours.system)) == 22
    frames, _ = langevin(ours, seed=5, n=20, every=50, equilibrate=500)
    np.testing.assert_allclose(_energies(ours.system, frames), _energies(theirs, frames), rtol=0, atol=1e-3)
    assert MixedCoordinateTransform.shell(ours, fix_constrained=True).n_dims == 98


@pytest.mark.parametrize("name, n_atoms", [("alanine-dipeptide", 22), ("alanine-tetrapeptide", 42)])
def test_flow_dims_are_3n_minus_6_less_the_fixed_constraints(name, n_atoms):
    held = get_molecule(name)
    free = get_molecule(name, SystemSpec(constraints="none"))
    n_held = MixedCoordinateTransform.shell(held, fix_constrained=True).n_dims
    assert n_held == 3 * n_atoms - 6 - len(constrained_bonds(held))
    assert MixedCoordinateTransform.shell(free, fix_constrained=True).n_dims == 3 * n_atoms - 6


def test_a_heavy_atom_pdb_gets_its_hydrogens_and_travels_in_records(tmp_path):
    full = mdtraj.load(TETRAPEPTIDE_PDB)
    path = tmp_path / "heavy.pdb"
    full.atom_slice(full.topology.select("not element H")).save_pdb(str(path))
    molecule = pdb_molecule(path)
    assert molecule.name == "pdb:heavy" and molecule.n_atoms == 42
    assert molecule.system.getNumConstraints() == len(constrained_bonds(get_molecule("alanine-tetrapeptide")))
    assert _energy(molecule) < 0.0  # minimized, no clash
    again = molecule_of(molecule.record())
    assert np.array_equal(again.positions, molecule.positions)
    assert np.array_equal(again.z_matrix, molecule.z_matrix)
    check_same_molecule(molecule, again)
    with pytest.raises(InputError, match="different molecules"):
        check_same_molecule(molecule, get_molecule("alanine-tetrapeptide"))
    with pytest.raises(InputError, match="constraints hbonds vs none"):
        check_same_molecule(get_molecule(), get_molecule(None, SystemSpec(constraints="none")))


def _with_ion(path, tmp_path):
    text = open(path).read().replace("END\n", "")
    ion = "HETATM  999 NA    NA B   9       9.000   9.000   9.000  1.00  0.00          NA\nEND\n"
    (tmp_path / "ion.pdb").write_text(text + ion)
    return tmp_path / "ion.pdb"


def _two_pieces(tmp_path):
    """Two copies of alanine dipeptide 1.5 nm apart, in one file: two fragments."""
    dipeptide = mdtraj.load(DIPEPTIDE_PDB)
    shifted = dipeptide.slice(0)
    shifted.xyz += 1.5
    dipeptide.stack(shifted).save_pdb(str(tmp_path / "two.pdb"))
    return tmp_path / "two.pdb"


def _unknown_residue(tmp_path):
    """Alanine dipeptide with its ALA renamed XYZ: a residue no force field covers."""
    renamed = tmp_path / "xyz.pdb"
    renamed.write_text(open(DIPEPTIDE_PDB).read().replace("ALA", "XYZ"))
    return renamed


def _residues_swapped(tmp_path):
    """The tetrapeptide with its residues 3 and 4 swapped in the file, no CONECT records: OpenMM
    bonds them in file order, ACE's C to ALA 3's N, which lies far away."""
    atoms = [line for line in open(TETRAPEPTIDE_PDB) if line.startswith(("ATOM", "HETATM"))]
    blocks = {n: [line for line in atoms if int(line[22:26]) == n] for n in range(1, 6)}
    (tmp_path / "swapped.pdb").write_text("".join(blocks[1] + blocks[3] + blocks[2] + blocks[4] + blocks[5]) + "END\n")
    return tmp_path / "swapped.pdb"


def test_structures_one_zmatrix_cannot_cover_are_refused(tmp_path):
    with pytest.raises(InputError, match="in 2 pieces"):
        pdb_molecule(_two_pieces(tmp_path))
    with pytest.raises(InputError, match="nm long .* list them in chain order"):
        pdb_molecule(_residues_swapped(tmp_path))
    with pytest.raises(InputError, match="does not cover the residue"):
        pdb_molecule(_with_ion(DIPEPTIDE_PDB, tmp_path))
    with pytest.raises(InputError, match="XYZ"):
        pdb_molecule(_unknown_residue(tmp_path))
    with pytest.raises(InputError, match="no structure file"):
        pdb_molecule(tmp_path / "missing.pdb")


def test_md_settings_refuse_bad_combinations(tmp_path):
    with pytest.raises(InputError, match="not both"):
        MDSettings(molecule="alanine-dipeptide", pdb=DIPEPTIDE_PDB).resolved()
    with pytest.raises(InputError, match="too long for free X-H bonds"):
        MDSettings(constraints="none", timestep_fs=2.0).resolved()
    assert MDSettings(constraints="none").resolved().timestep_fs == 1.0
    assert MDSettings().resolved().timestep_fs == 2.0


def test_runs_of_older_versions_still_resume():
    old = {"constraints": "HBonds", "force_field": ["amber99sbildn.xml", "amber96_obc.xml"], "timestep_fs": 2.0}
    s = MDSettings(frames=10, replicas=1).resolved()
    record = {k: v for k, v in vars(s).items() if k not in ("forcefield", "solvent", "constraints", "pdb")} | old
    assert _differing(record | {"molecule": "alanine-dipeptide"}, s, ()) == []
    free = MDSettings(frames=10, replicas=1, constraints="none").resolved()
    assert "constraints" in _differing(record, free, ())


@pytest.mark.slow
def test_simulate_a_pdb_file_without_constraints(cli, tmp_path):
    out = tmp_path / "free.h5"
    args = ("--frames", 50, "--equilibration-ps", 0.2, "--replicas", 1, "--quiet", "--out", out)
    result = cli("simulate", "--pdb", DIPEPTIDE_PDB, "--constraints", "none", "--solvent", "vacuum", *args)
    assert result.returncode == 0, result.stderr
    settings = read_settings(out)
    recorded = (settings["molecule"], settings["constraints"], settings["timestep_fs"])
    assert recorded == ("pdb:alanine-dipeptide", "none", 1.0)
    assert molecule_of(settings).system.getNumConstraints() == 0
    assert mdtraj.load(str(out)).n_frames == 50


def test_simulate_refuses_bad_structures_and_leaves_nothing(cli, tmp_path):
    out = tmp_path / "out" / "x.h5"
    for args in (
        ("--pdb", str(_with_ion(DIPEPTIDE_PDB, tmp_path))),
        ("--pdb", str(_two_pieces(tmp_path))),
        ("--pdb", str(_unknown_residue(tmp_path))),
        ("--pdb", str(_residues_swapped(tmp_path))),
        ("--pdb", DIPEPTIDE_PDB, "--molecule", "alanine-dipeptide"),
        ("--constraints", "none", "--timestep-fs", 2),
        ("--forcefield", "charmm"),
        ("--temperature", "inf"),  # passes "> 0": only a finiteness check stops it
        ("--friction", "nan"),
    ):
        result = cli("simulate", *args, "--frames", 10, "--replicas", 1, "--out", out)
        assert result.returncode == 2, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1
        assert args[1] not in ("inf", "nan") or "must be a finite number" in result.stderr
        assert not out.exists() and not out.with_name("x.h5.partial").exists()


@pytest.mark.slow
def test_a_pdb_molecule_without_constraints_end_to_end(cli, tmp_path):
    """simulate --pdb (hydrogens added, constraints none) -> train -> sample -> analyze: 60 flow dims,
    every stage rebuilds the molecule from the records alone (the PDB file is gone after simulate)."""
    full = mdtraj.load(DIPEPTIDE_PDB)
    pdb = tmp_path / "mine.pdb"
    full.atom_slice(full.topology.select("not element H")).save_pdb(str(pdb))
    data, run, report = tmp_path / "mine.h5", tmp_path / "run", tmp_path / "report"
    md = ("--frames", 400, "--equilibration-ps", 1, "--replicas", 1, "--quiet", "--out", data)
    assert cli("simulate", "--pdb", pdb, "--constraints", "none", *md).returncode == 0
    pdb.unlink()
    tiny = ("--steps", 20, "--blocks", 1, "--hidden", 16, "--batch", 32, "--eval-every", 10)
    result = cli("train", "--data", data, "--out", run, "--model", "spline", *tiny, "--workers", 1, "--quiet")
    assert result.returncode == 0, result.stderr
    assert json.loads((run / "complete.json").read_text())["n_dims"] == 60
    result = cli("sample", run, "--n", 64, "--workers", 1, "--refine", 0, "--quiet")
    assert result.returncode == 0, result.stderr
    result = cli("analyze", run, "--data", data, "--out", report, "--workers", 1)
    assert result.returncode == 0, result.stderr
    assert json.loads((report / "metrics.json").read_text())["models"]


def test_the_pipeline_names_its_data_after_the_molecule(cli, tmp_path):
    from pathlib import Path

    from bgp4.simulation.md import data_path

    assert data_path(Path("o"), MDSettings()) == Path("o/data/ala2-600K.h5")  # as always
    assert data_path(Path("o"), MDSettings(molecule="alanine-tetrapeptide")).name == "alanine-tetrapeptide-600K.h5"
    free = MDSettings(pdb="x/mine.pdb", constraints="none", temperature=300.0)
    assert data_path(Path("o"), free).name == "mine-free-300K.h5"
    # the name is the molecule's registered one, and every part of the system not the default
    assert data_path(Path("o"), MDSettings(molecule="alanine-dipeptide")).name == "ala2-600K.h5"
    assert data_path(Path("o"), MDSettings(molecule="sequence:aaa")).name == "sequence-AAA-600K.h5"
    assert data_path(Path("o"), MDSettings(solvent="vacuum")).name == "ala2-vacuum-600K.h5"
    amber14_free = MDSettings(forcefield="amber14", constraints="none")
    assert data_path(Path("o"), amber14_free).name == "ala2-amber14-free-600K.h5"
    bad = (("--sequence", "AAA", "--molecule", "alanine-dipeptide"), ("--solvent", "water"), ("--device", "foo"))
    for args in bad:  # each refused before the MD stage writes its data
        result = cli("pipeline", "--out", tmp_path / "p", *args, "--quiet")
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert not (tmp_path / "p").exists()


def test_a_preset_that_relabels_hydrogens_refuses_a_molecule_without_them_before_the_md(tmp_path, monkeypatch):
    import bgp4.simulation.atoms as atoms
    from bgp4.errors import InputError
    from bgp4.pipeline import run_pipeline

    monkeypatch.setattr(atoms, "rotor_hydrogens", lambda molecule: [])  # as for a molecule without methyls
    with pytest.raises(InputError, match=r"relabels interchangeable hydrogens \(augment\) for spline, and"):
        run_pipeline("quick", tmp_path / "p", progress=False, say=lambda line: None)
    assert not (tmp_path / "p").exists()


def test_each_pipeline_preset_has_its_own_default_directory(cli, monkeypatch):
    from pathlib import Path

    import bgp4.cli.sweeps as sweeps

    seen = []
    monkeypatch.setattr(sweeps, "run_pipeline", lambda preset, out, **kw: seen.append((preset, out)))
    for preset in ("quick", "paper"):
        assert cli("pipeline", "--preset", preset, "--quiet").returncode == 0
    assert seen == [("quick", Path("out/quick")), ("paper", Path("out/paper"))]  # a quick run never blocks paper


def test_the_help_names_every_registered_molecule(cli):
    # the CLI spells the names out (importing the molecule layer would load OpenMM at start-up)
    from bgp4.simulation.molecule import MOLECULES, SEQUENCE_PREFIX

    for command in ("simulate", "train", "pipeline"):
        text = " ".join(cli(command, "--help").stdout.split())
        for name in [*MOLECULES, SEQUENCE_PREFIX]:
            assert name in text.replace("- ", "-"), (command, name)  # rich may wrap after a hyphen
