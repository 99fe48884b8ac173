"""Replica exchange (`bgp4 simulate --replica-exchange`): a tiny run's file, record, segments; scripts that read it."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import mdtraj
import numpy as np
import openmm
import pytest
from _remd_helpers import TINY
from _scripts import load_script

from bgp4.errors import Bgp4Error, InputError
from bgp4.simulation import _remd_segments as segments
from bgp4.simulation import remd
from bgp4.simulation.data import load_trajectory, read_settings
from bgp4.simulation.ladder import (
    check_replica_exchange,
    exchange_acceptance,
    short_iteration_warning,
    temperature_ladder,
    velocity_refresh_of,
)
from bgp4.simulation.md import completed, simulate
from bgp4.stage import Stage


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The TINY run, with what it leaves behind for the tests: a copy of its work directory (the
    openmmtools storage, which `simulate` removes), the sampler's state right after equilibration,
    and what it printed on stderr."""
    from openmmtools.multistate import ParallelTemperingSampler

    out = tmp_path_factory.mktemp("remd") / "tiny.h5"
    kept, seen, stderr = out.with_name("kept.partial"), {}, io.StringIO()
    run, equilibrate = remd.run_replica_exchange, ParallelTemperingSampler.equilibrate

    def run_and_keep(out, work, progress=True):
        run(out, work, progress)
        shutil.copytree(work, kept)

    def equilibrate_and_look(sampler, *args, **kwargs):
        equilibrate(sampler, *args, **kwargs)
        seen["where"] = sampler._replica_thermodynamic_states.copy()
        seen["energies"] = sampler._energy_thermodynamic_states.copy()

    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(stderr):
        patch.setattr(remd, "run_replica_exchange", run_and_keep)
        patch.setattr(ParallelTemperingSampler, "equilibrate", equilibrate_and_look)
        simulate(out, TINY, progress=False)
    return SimpleNamespace(out=out, work=kept, equilibrated=seen, stderr=stderr.getvalue())


@pytest.fixture(scope="module")
def tiny_run(tiny):
    return tiny.out


def test_ladder_is_geometric_from_the_temperature_asked_for():
    ladder = temperature_ladder("300:600:8")
    assert len(ladder) == 8 and ladder[0] == 300.0 and ladder[-1] == 600.0
    assert np.allclose(np.diff(np.log(ladder)), np.log(2.0) / 7)
    assert check_replica_exchange("300.0:6e2:8", 300, 0) == "300:600:8"
    counts = np.array([[0, 3, 0], [3, 0, 1], [0, 1, 0]])
    assert exchange_acceptance(counts, 2 * counts + np.eye(3, dtype=int)) == [0.5, 0.5]
    assert exchange_acceptance(np.zeros((2, 2)), np.zeros((2, 2))) == [None]


def test_tiny_run_is_an_mdtraj_file_with_its_record(tiny_run, molecule):
    traj = mdtraj.load(str(tiny_run))
    assert traj.n_frames == 20 and traj.n_atoms == molecule.n_atoms
    stored = read_settings(tiny_run)
    assert stored["kind"] == "md" and stored["method"] == "replica-exchange"
    assert stored["molecule"] == "alanine-dipeptide" and stored["constraints"] == "none"
    assert stored["temperature"] == 300.0 and stored["replica_exchange"] == "300:600:3"
    assert stored["temperatures"] == pytest.approx([300.0, 424.26406871, 600.0])
    assert stored["iterations"] == 20 and stored["steps_per_iteration"] == 20 and stored["timestep_fs"] == 1.0
    rates = stored["exchange_acceptance"]
    assert len(rates) == 2 and all(r is None or 0.0 <= r <= 1.0 for r in rates)
    assert sum(stored["exchange_attempts"]) > 0
    data = load_trajectory(tiny_run, extras=("walker", "replica"))
    assert data.molecule().n_atoms == molecule.n_atoms
    assert set(data.extras["walker"]) <= {0, 1, 2} and not data.extras["replica"].any()
    assert np.allclose(traj.time, np.arange(1, 21) * 0.02)  # ps: one frame per 20 steps of 1 fs
    assert not tiny_run.with_name(tiny_run.name + ".partial").exists()


def test_md_cost_counts_every_walker_and_its_equilibration(tiny_run):
    from bgp4.simulation.data import md_energy_evaluations

    # 3 walkers x (20 iterations + 10 of equilibration, 0.2 ps) x 20 steps
    assert md_energy_evaluations(read_settings(tiny_run), 20) == 3 * (20 + 10) * 20


def test_energies_are_the_lowest_temperatures_potential(tiny_run):
    data = load_trajectory(tiny_run)
    system = data.molecule().system
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    for i in (0, 9, 19):
        context.setPositions(data.xyz[i].astype(np.float64))
        energy = context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole)
        assert energy == pytest.approx(data.energies[i], abs=2e-3)  # positions stored as float32
    assert np.unique(data.xyz.reshape(20, -1), axis=0).shape[0] == 20


def test_finished_file_is_complete_for_its_settings_only(tiny_run, cli):
    assert completed(tiny_run, TINY)
    assert completed(tiny_run, replace(TINY, replica_exchange="300.0:600:3"))  # the same ladder
    with pytest.raises(InputError, match="other settings.*replica_exchange"):
        completed(tiny_run, replace(TINY, replica_exchange=""))
    with pytest.raises(InputError, match="other settings"):
        completed(tiny_run, replace(TINY, replica_exchange="300:600:4"))
    flags = ["--frames", "20", "--temperature", "300", "--replica-exchange", "300:600:3", "--save-every", "20"]
    flags += ["--equilibration-ps", "0.2", "--constraints", "none", "--seed", "3"]
    done = cli("simulate", "--out", tiny_run, *flags)
    assert done.returncode == 0 and "already complete" in done.stdout


def test_equilibrated_walkers_resume_at_their_temperatures(tiny, molecule):
    """openmmtools' `equilibrate` stores positions only; the run stores the temperature assignment
    and energies with them, so the segment resumes where equilibration left the walkers."""
    where, energies = tiny.equilibrated["where"], tiny.equilibrated["energies"]
    assert sorted(where) == [0, 1, 2] and list(where) != [0, 1, 2]  # exchanges moved them (seed 3)
    segment = tiny.work / "segment-0000"
    with remd._openmmtools_quietly():
        sampler, reporter = remd._open(segment, Stage(tiny.work).recorded(), molecule.n_atoms)
        reporter.close()
    assert sampler.iteration == 20  # from_storage opens a segment at its last checkpoint (a run opens only new ones)
    reporter = segments.reporter(segment, molecule.n_atoms, mode="r")
    try:
        stored_where = reporter.read_replica_thermodynamic_states(0)
        stored_energies, _, _ = reporter.read_energies(0)
    finally:
        reporter.close()
    assert np.array_equal(stored_where, where)
    assert np.allclose(stored_energies, energies, rtol=1e-5)  # not create()'s zeros (recomputed: float32 rounding)


def test_file_frames_are_the_lowest_temperatures_walkers(tiny, molecule):
    """Read back from the storage: the walker each frame was taken from sat at temperature 0."""
    import netCDF4

    data = load_trajectory(tiny.out, extras=("walker",))
    walker = data.extras["walker"].astype(int)
    segment = tiny.work / "segment-0000"
    reporter = segments.reporter(segment, molecule.n_atoms, mode="r")
    try:
        where = reporter.read_replica_thermodynamic_states(slice(1, 21))  # (iterations, walkers)
    finally:
        reporter.close()
    assert np.all(where[np.arange(20), walker] == 0)
    assert len(set(walker)) > 1  # the lowest temperature was held by several walkers
    with netCDF4.Dataset(str(segment / segments.STORAGE), "r") as storage:
        positions = np.asarray(storage.variables["positions"][1:21], dtype=np.float32)
    assert np.array_equal(data.xyz, positions[np.arange(20), walker])


def test_short_iterations_warn_once_on_stderr(tiny):
    lines = [line for line in tiny.stderr.splitlines() if "redraws velocities" in line]
    assert len(lines) == 1 and "--save-every 500" in lines[0] and "0.02 ps" in lines[0]
    assert short_iteration_warning(500, 1.0) is None and short_iteration_warning(50, 2.0) is None
    assert "--save-every 250" in short_iteration_warning(10, 2.0)


def test_a_stopped_segment_is_sealed_at_its_last_checkpoint_without_a_write(tiny, molecule, tmp_path, capsys):
    """A segment that a stop left unsealed is sealed where its last checkpoint is, and its storage
    files are read only (an HDF5 file killed mid-write can read well and fail on its next write);
    one that does not read back is left for the run to make again."""
    segment, damaged = tmp_path / "segment-0000", tmp_path / "segment-0001"
    for directory in (segment, damaged):
        shutil.copytree(tiny.work / "segment-0000", directory)
        (directory / segments.DONE).unlink()
        (directory / segments.SEGMENT_INFO).write_text(json.dumps({"start": 0, "iterations": 1000}))
    import netCDF4

    with netCDF4.Dataset(str(segment / segments.STORAGE), "a") as storage:  # as if stopped after iteration 13
        storage.variables["last_iteration"][0] = 13
    files = (segments.STORAGE, segments.CHECKPOINT_STORAGE)
    before = {name: (segment / name).read_bytes() for name in files}
    with remd._openmmtools_quietly():
        assert segments.seal_at_checkpoint(segment, molecule.n_atoms) == 10  # checkpoints every 10
    assert json.loads((segment / segments.SEGMENT_INFO).read_text()) == {"start": 0, "iterations": 10}
    assert json.loads((segment / segments.DONE).read_text()) == {"iterations": 10}
    assert {name: (segment / name).read_bytes() for name in files} == before
    assert segments.sealed(tmp_path) == [{"start": 0, "iterations": 10}]
    frames = segments.read_frames(segment, {"iterations": 10}, 10, molecule.n_atoms, 1.0)
    assert frames["xyz"].shape == (10, molecule.n_atoms, 3)
    (damaged / segments.STORAGE).write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(4000))
    with remd._openmmtools_quietly():
        assert segments.seal_at_checkpoint(damaged, molecule.n_atoms) == 0
    assert "does not open" in capsys.readouterr().err and not (damaged / segments.DONE).exists()
    # a sealed segment must start where those before it end (its neighbour was made again)
    (damaged / segments.SEGMENT_INFO).write_text(json.dumps({"start": 20, "iterations": 20}))
    (damaged / segments.DONE).write_text(json.dumps({"iterations": 20}))
    with pytest.raises(Bgp4Error, match="starts at iteration 20, not 10"):
        segments.sealed(tmp_path)


def test_an_opened_segment_knows_each_walkers_temperature(tiny, molecule):
    """The move's note of each walker's last temperature is not stored; a segment opened past its
    iteration 0 gets it from the stored assignment, so the first iteration after a resume scales
    exchanged walkers (the first production iteration is checked in the exchange-refresh run below)."""
    record = Stage(tiny.work).recorded()
    with remd._openmmtools_quietly():
        sampler, reporter = remd._open(tiny.work / "segment-0000", record, molecule.n_atoms)
        reporter.close()
    assert sampler.iteration == 20
    remd._note_temperatures(sampler)
    ladder = record["temperatures"]
    noted = [w._bgp4_last_temperature_K for w in sampler._sampler_states]
    assert noted == [ladder[int(i)] for i in sampler._replica_thermodynamic_states]


def test_a_sealed_segment_stores_the_runs_moves(tiny, molecule):
    """The moves written once per segment are the run's: the steps of an iteration and the refresh."""
    record = Stage(tiny.work).recorded()
    with remd._openmmtools_quietly():
        reporter = segments.reporter(tiny.work / "segment-0000", molecule.n_atoms, mode="r")
        moves = reporter.read_mcmc_moves()
        reporter.close()
    assert len(moves) == len(record["temperatures"])
    assert {m.n_steps for m in moves} == {record["save_every"]}
    assert {m.refresh for m in moves} == {velocity_refresh_of(record)}


@pytest.mark.slow
def test_same_seed_same_frames(tiny_run, tmp_path):
    again = simulate(tmp_path / "again.h5", TINY, progress=False)
    first, second = load_trajectory(tiny_run, extras=("walker",)), load_trajectory(again, extras=("walker",))
    assert np.array_equal(first.xyz, second.xyz) and np.array_equal(first.energies, second.energies)
    assert np.array_equal(first.extras["walker"], second.extras["walker"])
    assert read_settings(tiny_run)["exchange_acceptance"] == read_settings(again)["exchange_acceptance"]


@pytest.mark.slow
def test_remd_check_script_compares_with_plain_md(tiny_run, tmp_path):
    md = replace(TINY, replica_exchange="", frames=200, replicas=1, save_every=10, equilibration_ps=0.1)
    simulate(tmp_path / "md.h5", md, progress=False)
    script = Path(__file__).resolve().parents[1] / "run" / "scripts" / "remd_check.py"
    args = [sys.executable, str(script), str(tiny_run), str(tmp_path / "md.h5"), "--blocks", "4"]
    done = subprocess.run([*args, "--json", str(tmp_path / "c.json")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "replica exchange" in done.stdout and "plain MD" in done.stdout and "ns of MD" in done.stdout
    result = json.loads((tmp_path / "c.json").read_text())
    first, second = result["first"], result["second"]
    assert first["frames"] == 20 and second["frames"] == 200
    assert first["kept_ns"] == pytest.approx(20 * 20 * 1e-6)
    assert first["total_ns"] == pytest.approx(3 * (20 + 10) * 20 * 1e-6)  # 0.2 ps: 10 iterations each
    assert np.isfinite(result["energy"]["difference"]) and result["energy"]["se"] > 0
    # per residue: the dipeptide's one residue is its own phi
    assert list(first["residues"]) == ["ALA2"] and "ALA2 dF" in done.stdout and "ALA2 P" in done.stdout
    assert first["residues"]["ALA2"]["p_phi_positive"] == first["p_phi_positive"]
    c = result["residues"]["ALA2"]["p_phi_positive"]
    assert c["difference"] == pytest.approx(first["p_phi_positive"] - second["p_phi_positive"])


def _umbrella_script():
    return load_script("run/scripts/umbrella_phi.py")


def test_umbrella_mbar_recovers_a_known_p_phi_positive():
    """run/scripts/umbrella_phi.py's MBAR step on exact samples of a known density on the circle,
    each window's drawn under its own bias: P(phi > 0) comes back within its error."""
    umbrella = _umbrella_script()
    kT, k, windows = 2.5, 100.0, 24  # kJ/mol, kJ/mol/rad^2
    grid = np.linspace(-np.pi, np.pi, 36_001)[:-1]
    u = 3.0 * np.cos(grid) + 1.5 * np.cos(2.0 * (grid + 1.0))  # in kT: two basins, one of them at phi > 0
    density = np.exp(-(u - u.min()))
    truth = density[grid > 0].sum() / density.sum()
    rng = np.random.default_rng(5)
    samples = []
    for centre in np.radians(-180.0 + 360.0 * np.arange(windows) / windows):
        d = np.abs(grid - centre)
        d = np.minimum(d, 2 * np.pi - d)
        biased = density * np.exp(-0.5 * k * d**2 / kT)
        samples.append(rng.choice(grid, size=300, p=biased / biased.sum()))
    p, se = umbrella.mbar_p_positive(samples, k, kT)
    assert 0.05 < truth < 0.5 and 0 < se < 0.02
    assert abs(p - truth) < 4 * se


def test_umbrella_windows_of_another_run_are_refused(tmp_path):
    """A work folder keeps its run's settings and target: windows of another --ps, --k, --seed or
    data file, or windows without a record, are refused; the same run goes on. Velocity seeds are
    distinct over the allowed seeds, within OpenMM's int32, and seed 17 keeps the first runs'."""
    umbrella = _umbrella_script()
    target = {"molecule": "alanine-dipeptide", "temperature": 300.0, "timestep_fs": 1.0}
    data = SimpleNamespace(molecule=lambda: None, settings=target)
    run = dict(windows=72, ps=1000.0, k=400.0, seed=18)
    with pytest.raises(AttributeError):  # the record is written; then the (absent) molecule is used
        umbrella.run_windows(data, tmp_path, **run)
    record = (tmp_path / "umbrella.json").read_text()
    assert '"seed": 18' in record and '"temperature": 300.0' in record
    with pytest.raises(AttributeError):  # the same run again: accepted, it goes on
        umbrella.run_windows(data, tmp_path, **run)
    other_data = SimpleNamespace(molecule=lambda: None, settings={**target, "temperature": 600.0})
    for change, d in ((dict(ps=250.0), data), (dict(k=100.0), data), (dict(seed=19), data), ({}, other_data)):
        with pytest.raises(InputError, match="holds windows of another run"):
            umbrella.run_windows(d, tmp_path, **{**run, **change})
    old = tmp_path / "old"
    old.mkdir()
    (old / "window-000.npz").write_bytes(b"")
    with pytest.raises(InputError, match="without a record"):
        umbrella.run_windows(data, old, **run)
    assert umbrella.velocity_seed(17, 5) == 105
    seeds = [1, 2, 16, 17, 18, 1017, umbrella.MAX_SEED]
    drawn = {umbrella.velocity_seed(seed, w) for seed in seeds for w in range(umbrella.MAX_WINDOWS)}
    assert len(drawn) == len(seeds) * umbrella.MAX_WINDOWS and 0 < min(drawn) and max(drawn) < 2**31


@pytest.mark.slow
def test_merge_keeps_the_frames_of_a_replica_exchange_and_plain_md_of_one_target(tiny_run, tmp_path):
    """`bgp4 merge` of a replica exchange and plain MD: frames in order, the first file's system,
    no per-frame MD cost; files at different temperatures are refused."""
    from bgp4.simulation.merge import merge

    md = replace(TINY, replica_exchange="", frames=200, replicas=1, save_every=10, equilibration_ps=0.1)
    simulate(tmp_path / "md.h5", md, progress=False)
    out = merge(tmp_path / "merged.h5", [tiny_run, tmp_path / "md.h5"])
    merged, first, second = (load_trajectory(p) for p in (out, tiny_run, tmp_path / "md.h5"))
    assert merged.n_frames == first.n_frames + second.n_frames == 220
    np.testing.assert_array_equal(merged.xyz, np.concatenate([first.xyz, second.xyz]))
    assert merged.settings["frames"] == 220 and "save_every" not in merged.settings
    assert [m["frames"] for m in merged.settings["merged_from"]] == [20, 200]
    assert merged.molecule().name == first.molecule().name
    simulate(tmp_path / "hot.h5", replace(md, temperature=md.temperature + 50.0), progress=False)
    with pytest.raises(InputError, match="different temperatures"):
        merge(tmp_path / "m2.h5", [tmp_path / "md.h5", tmp_path / "hot.h5"])
    assert not (tmp_path / "m2.h5").exists()


@pytest.mark.slow
def test_subset_data_script_takes_every_kth_frame_and_keeps_the_md_cost(tiny_run, tmp_path):
    """run/scripts/subset_data.py: frames start, start + K, ...; save_every times K, so the MD
    behind the subset is counted; a subset past the input's end is refused with nothing written."""
    script = Path(__file__).resolve().parents[1] / "run" / "scripts" / "subset_data.py"
    out = tmp_path / "subset.h5"

    def run(path, *args):
        command = [sys.executable, str(script), str(path), str(tiny_run), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    done = run(out, "--frames", "6", "--stride", "3", "--start", "2")
    assert done.returncode == 0, done.stderr
    subset, full = load_trajectory(out), load_trajectory(tiny_run)
    np.testing.assert_array_equal(subset.xyz, full.xyz[2:20:3])
    np.testing.assert_allclose(subset.energies, full.energies[2:20:3], rtol=1e-6)
    assert subset.settings["frames"] == 6 and subset.settings["save_every"] == 3 * full.settings["save_every"]
    assert subset.settings["subset_of"] == {"path": str(tiny_run), "start": 2, "stride": 3}
    refused = run(tmp_path / "s2.h5", "--frames", "8", "--stride", "3")
    assert refused.returncode != 0 and "has 20 frames" in refused.stderr
    assert not (tmp_path / "s2.h5").exists()
