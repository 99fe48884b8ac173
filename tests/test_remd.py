"""Replica exchange (`bgp4 simulate --replica-exchange`): the file, its record, resume, bad input."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import mdtraj
import numpy as np
import openmm
import pytest

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
from bgp4.simulation.md import MDSettings, completed, simulate
from bgp4.stage import Stage

TINY = MDSettings(
    frames=20,
    temperature=300.0,
    replica_exchange="300:600:3",
    save_every=20,
    equilibration_ps=0.2,
    constraints="none",
    seed=3,
)


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


def _harmonic_wells(n: int, k: float) -> openmm.System:
    """n independent particles of 1 dalton, each in an isotropic harmonic well (k in kJ/mol/nm^2)."""
    system = openmm.System()
    force = openmm.CustomExternalForce("0.5*k*(x^2+y^2+z^2)")
    force.addGlobalParameter("k", k)
    for i in range(n):
        system.addParticle(1.0)
        force.addParticle(i, [])
    system.addForce(force)
    return system


@pytest.mark.slow
def test_velocity_refresh_keeps_langevin_middle_sampling_of_fast_modes():
    """LangevinMiddle samples a harmonic well's positions exactly at any time step: <U> = 3/2 kT a
    particle. A mode as fast as a free X-H stretch at 1 fs (dt omega = 0.6) keeps that through the
    move's velocity refresh at every iteration; redrawing the velocities with OpenMM's
    setVelocitiesToTemperature instead made it about 1.62 kT (8 % hot) in this setting."""
    from openmm import unit
    from openmmtools import cache, states

    from bgp4.simulation._remd_move import SeededLangevinMove

    n, k = 20, 3.6e5  # omega = sqrt(k / m) = 600 / ps
    thermodynamic_state = states.ThermodynamicState(_harmonic_wells(n, k), 300 * unit.kelvin)
    sampler_state = states.SamplerState(np.zeros((n, 3)) * unit.nanometer)
    move = SeededLangevinMove(timestep=1.0 * unit.femtosecond, collision_rate=10.0 / unit.picosecond, n_steps=7)
    contexts = cache.ContextCache(platform=openmm.Platform.getPlatformByName("Reference"))
    kT = thermodynamic_state.kT.value_in_unit(unit.kilojoule_per_mole)
    u, global_state = [], np.random.get_state()
    np.random.seed(0)  # the move's seeds come from numpy's global stream, as in a run
    try:
        for _ in range(1100):
            move.apply(thermodynamic_state, sampler_state, context_cache=contexts)
            u.append(0.5 * k * np.sum(sampler_state.positions.value_in_unit(unit.nanometer) ** 2) / kT / n)
    finally:
        np.random.set_state(global_state)
    assert np.mean(u[100:]) == pytest.approx(1.5, abs=0.04)  # standard error about 0.01


def test_velocity_refresh_after_an_exchange_scales_the_old_on_step_velocity():
    """A walker that comes from 600 K to 300 K: its on-step velocity v + dt/2 F/m is scaled by
    sqrt(300 / 600) before the last half drift is undone, then the new velocities are the seed's
    Maxwell-Boltzmann draw and the drift is redone with them."""
    from openmm import unit

    from bgp4.simulation._remd_move import refresh_velocities

    k, dt, seed = 3.6e5, 0.001, 11
    system = _harmonic_wells(2, k)
    integrator = openmm.LangevinMiddleIntegrator(300, 1.0, dt)
    context = openmm.Context(system, integrator, openmm.Platform.getPlatformByName("Reference"))
    x, v = np.array([[0.01, 0.0, -0.002], [0.0, 0.003, 0.0]]), np.array([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]])
    context.setPositions(x)
    context.setVelocities(v)
    refresh_velocities(context, 300 * unit.kelvin, seed, came_from=600.0)
    kick = 0.5 * dt * (-k * x)  # dt/2 F/m, m = 1 dalton
    v_scaled = np.sqrt(0.5) * (v + kick) - kick
    v_new = np.random.default_rng(seed).standard_normal((2, 3)) * np.sqrt(0.0083144626 * 300)
    state = context.getState(getPositions=True, getVelocities=True)
    assert np.allclose(state.getVelocities(asNumpy=True)._value, v_new, rtol=1e-6)
    assert np.allclose(
        state.getPositions(asNumpy=True)._value, x + 0.5 * dt * (v_new - v_scaled), rtol=1e-6, atol=1e-12
    )


def test_exchange_refresh_redraws_only_a_walker_that_changed_temperature(monkeypatch):
    """refresh="exchange": the first propagation (origin unknown) and one after a move to another
    temperature draw velocities; propagations that stay at one temperature continue the trajectory,
    and the harmonic wells keep LangevinMiddle's exact <U> = 3/2 kT a particle."""
    from openmm import unit
    from openmmtools import cache, states

    from bgp4.simulation import _remd_move

    calls, refresh = [], _remd_move.refresh_velocities

    def counted(*args, **kwargs):
        calls.append(kwargs["came_from"])
        refresh(*args, **kwargs)

    monkeypatch.setattr(_remd_move, "refresh_velocities", counted)
    n, k = 20, 3.6e5
    cold, hot = (states.ThermodynamicState(_harmonic_wells(n, k), t * unit.kelvin) for t in (300, 400))
    sampler_state = states.SamplerState(np.zeros((n, 3)) * unit.nanometer)
    move = _remd_move.SeededLangevinMove(
        refresh="exchange", timestep=1.0 * unit.femtosecond, collision_rate=10.0 / unit.picosecond, n_steps=7
    )
    contexts = cache.ContextCache(platform=openmm.Platform.getPlatformByName("Reference"))
    kT = cold.kT.value_in_unit(unit.kilojoule_per_mole)
    u, global_state = [], np.random.get_state()
    np.random.seed(0)
    try:
        for state in (cold, cold, hot, hot, cold):
            move.apply(state, sampler_state, context_cache=contexts)
        assert calls == [None, 300.0, 400.0]
        for _ in range(1100):
            move.apply(cold, sampler_state, context_cache=contexts)
            u.append(0.5 * k * np.sum(sampler_state.positions.value_in_unit(unit.nanometer) ** 2) / kT / n)
    finally:
        np.random.set_state(global_state)
    assert len(calls) == 3
    assert np.mean(u[100:]) == pytest.approx(1.5, abs=0.04)
    again = _remd_move.SeededLangevinMove.__new__(_remd_move.SeededLangevinMove)
    again.__setstate__(move.__getstate__())  # how openmmtools stores and reopens the move
    assert again.refresh == "exchange"


@pytest.mark.parametrize("refresh, continued", [("exchange", True), ("iteration", False)])
def test_a_walker_that_stays_continues_its_trajectory_only_with_exchange_refresh(refresh, continued):
    """Without friction a continued trajectory keeps its total energy (to the integrator's error);
    a redraw of the velocities changes it. Second propagation at the same temperature."""
    from openmm import unit
    from openmmtools import cache, states

    from bgp4.simulation._remd_move import SeededLangevinMove

    n, k = 20, 1.0e3  # omega = 31.6 / ps: dt omega = 0.03 at 1 fs
    state = states.ThermodynamicState(_harmonic_wells(n, k), 300 * unit.kelvin)
    sampler_state = states.SamplerState(np.full((n, 3), 0.02) * unit.nanometer)
    move = SeededLangevinMove(
        refresh=refresh, timestep=1.0 * unit.femtosecond, collision_rate=0.0 / unit.picosecond, n_steps=50
    )
    contexts = cache.ContextCache(platform=openmm.Platform.getPlatformByName("Reference"))

    def total_energy() -> float:  # kJ/mol; 1 dalton particles
        x = sampler_state.positions.value_in_unit(unit.nanometer)
        v = sampler_state.velocities.value_in_unit(unit.nanometer / unit.picosecond)
        return float(0.5 * k * np.sum(x**2) + 0.5 * np.sum(v**2))

    global_state = np.random.get_state()
    np.random.seed(0)
    try:
        move.apply(state, sampler_state, context_cache=contexts)
        first = total_energy()
        move.apply(state, sampler_state, context_cache=contexts)
        second = total_energy()
    finally:
        np.random.set_state(global_state)
    assert (abs(second - first) / first < 0.01) == continued


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


def test_segment_reporter_writes_unchanged_moves_once(tmp_path, monkeypatch):
    """openmmtools stores the MCMC moves after every iteration; the same moves are written once per
    reporter, and again when they change."""
    from openmmtools.multistate import MultiStateReporter

    from bgp4.simulation._remd_move import SeededLangevinMove
    from bgp4.simulation._remd_storage import SegmentReporter

    written: list[list[int]] = []

    def record_write(self, moves):
        written.append([m.n_steps for m in moves])

    monkeypatch.setattr(MultiStateReporter, "write_mcmc_moves", record_write)
    moves = [SeededLangevinMove(n_steps=100), SeededLangevinMove(n_steps=100)]
    reporter = SegmentReporter(str(tmp_path / "remd.nc"))
    for _ in range(3):
        reporter.write_mcmc_moves(moves)
    assert written == [[100, 100]]
    moves[1].n_steps = 50
    reporter.write_mcmc_moves(moves)
    assert written == [[100, 100], [100, 50]]
    SegmentReporter(str(tmp_path / "remd.nc")).write_mcmc_moves(moves)  # a new reporter (a resume) writes them
    assert len(written) == 3


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


def test_exchange_refresh_run_records_it_and_does_not_warn_of_short_iterations(tmp_path, monkeypatch):
    """Also: the first production iteration refreshes every walker (equilibration's last mix moved
    some without propagating them), and later ones only some."""
    from bgp4.simulation import _remd_move

    calls, refresh, advance, per_iteration = [], _remd_move.refresh_velocities, remd._advance, []

    def counted(*args, **kwargs):
        calls.append(kwargs["came_from"])
        refresh(*args, **kwargs)

    def advance_counting(sampler, bar, stop=None):
        while sampler.iteration < sampler.number_of_iterations:
            before = len(calls)
            sampler.run(1)
            per_iteration.append(len(calls) - before)
        advance(sampler, bar, stop)

    monkeypatch.setattr(_remd_move, "refresh_velocities", counted)
    monkeypatch.setattr(remd, "_advance", advance_counting)
    out, stderr = tmp_path / "exchange.h5", io.StringIO()
    with contextlib.redirect_stderr(stderr):
        simulate(out, replace(TINY, frames=10, velocity_refresh="exchange"), progress=False)
    assert per_iteration[0] == 3 and len(per_iteration) == 10 and min(per_iteration[1:]) < 3
    settings = read_settings(out)
    assert settings["velocity_refresh"] == "exchange" and "only for a walker that changed" in settings["move"]
    assert "redraws velocities" not in stderr.getvalue()
    assert load_trajectory(out).xyz.shape[0] == 10
    assert completed(out, replace(TINY, frames=10, velocity_refresh="exchange"))
    with pytest.raises(InputError, match="velocity_refresh"):
        completed(out, replace(TINY, frames=10))


def test_timestep_error_names_the_limit_of_the_constraints_in_force():
    with pytest.raises(
        InputError, match=r"3 fs is too long for constrained X-H bonds \(constraints hbonds\): use at most 2 fs"
    ):
        MDSettings(constraints="hbonds", timestep_fs=3.0).resolved()
    with pytest.raises(InputError, match=r"too long for free X-H bonds \(constraints none\): use at most 1 fs"):
        MDSettings(constraints="none", timestep_fs=1.5).resolved()


@pytest.mark.slow
def test_same_seed_same_frames(tiny_run, tmp_path):
    again = simulate(tmp_path / "again.h5", TINY, progress=False)
    first, second = load_trajectory(tiny_run, extras=("walker",)), load_trajectory(again, extras=("walker",))
    assert np.array_equal(first.xyz, second.xyz) and np.array_equal(first.energies, second.energies)
    assert np.array_equal(first.extras["walker"], second.extras["walker"])
    assert read_settings(tiny_run)["exchange_acceptance"] == read_settings(again)["exchange_acceptance"]


def _interrupt_after(iterations: int):
    """An `_advance` that runs the segments before the second one whole, then stops (as Ctrl-C
    would) `iterations` into the second."""
    advance, calls = remd._advance, []

    def run(sampler, bar, stop=None):
        calls.append(1)
        if len(calls) == 1:
            return advance(sampler, bar, stop)
        for _ in range(iterations):
            sampler.run(1)
        raise KeyboardInterrupt

    return run


@pytest.mark.slow
@pytest.mark.parametrize("damage", [False, True], ids=["from-checkpoint", "damaged-storage"])
def test_interrupted_run_resumes_to_the_frames_asked_for(tmp_path, monkeypatch, capsys, damage):
    monkeypatch.setattr(segments, "SEGMENT_ITERATIONS", 20)
    settings = replace(TINY, frames=50, equilibration_ps=0.0)
    out, work = tmp_path / "cut.h5", tmp_path / "cut.h5.partial"
    with monkeypatch.context() as patch:
        patch.setattr(remd, "_advance", _interrupt_after(13))
        with pytest.raises(KeyboardInterrupt):
            simulate(out, settings, progress=False)
    assert not out.exists() and (work / "segment-0000" / "done.json").exists()
    assert not (work / "segment-0001" / "done.json").exists()
    with pytest.raises(InputError, match="partial run"):
        simulate(out, replace(settings, seed=6), progress=False)
    if damage:  # as a kill in the middle of an HDF5 write may leave it
        (work / "segment-0001" / "remd.nc").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(4000))
    opened, sealed, reporter, seal = [], [], segments.reporter, segments.seal_at_checkpoint

    def reporting(directory, n_atoms, mode=None):
        opened.append((directory.name, mode))
        return reporter(directory, n_atoms, mode)

    def sealing(directory, n_atoms):
        kept = seal(directory, n_atoms)
        sealed.append((directory.name, kept and json.loads((directory / segments.SEGMENT_INFO).read_text())))
        return kept

    monkeypatch.setattr(segments, "reporter", reporting)
    monkeypatch.setattr(segments, "seal_at_checkpoint", sealing)
    simulate(out, settings, progress=True)
    err = capsys.readouterr().err
    assert ("does not open" in err) == damage and "50/50" in err  # the bar counts a sealed segment too
    # a cut segment is read, never written again (a file killed mid-write may fail on its next write):
    # stopped after iteration 13 of 20, it is sealed at its checkpoint 10, and the next one starts there
    assert sealed == [("segment-0001", 0 if damage else {"start": 20, "iterations": 10})]
    assert (("segment-0001", None) in opened) == damage  # a damaged one is made again
    data = load_trajectory(out, extras=("walker",))
    assert data.n_frames == 50 and not work.exists()
    assert np.allclose(mdtraj.load(str(out)).time, np.arange(1, 51) * 0.02)
    assert np.unique(data.xyz.reshape(50, -1), axis=0).shape[0] == 50
    assert sum(read_settings(out)["exchange_attempts"]) > 0


@pytest.mark.slow
def test_a_partial_run_resumes_shorter_or_longer(tmp_path, monkeypatch):
    """Cut in its second segment, a 50-frame run resumed with 15 frames keeps the first 15 (those
    of a fresh 15-frame run: the first segment was sealed unbroken); resumed with 65 it goes on
    past the 50 it was started with (segments end on checkpoints: 20, the cut one sealed at its
    checkpoint 10, then 20 and 20)."""
    monkeypatch.setattr(segments, "SEGMENT_ITERATIONS", 20)
    settings = replace(TINY, frames=50, equilibration_ps=0.0)
    for frames in (15, 65):
        out, work = tmp_path / f"to-{frames}.h5", tmp_path / f"to-{frames}.h5.partial"
        with monkeypatch.context() as patch:
            patch.setattr(remd, "_advance", _interrupt_after(13))
            with pytest.raises(KeyboardInterrupt):
                simulate(out, settings, progress=False)
        simulate(out, replace(settings, frames=frames), progress=False)
        data = load_trajectory(out)
        assert data.n_frames == frames and not work.exists()
        assert read_settings(out)["frames"] == read_settings(out)["iterations"] == frames
        assert np.allclose(mdtraj.load(str(out)).time, np.arange(1, frames + 1) * 0.02)
        assert np.unique(data.xyz.reshape(frames, -1), axis=0).shape[0] == frames
    fresh = tmp_path / "fresh-15.h5"
    simulate(fresh, replace(settings, frames=15), progress=False)
    np.testing.assert_array_equal(load_trajectory(tmp_path / "to-15.h5").xyz, load_trajectory(fresh).xyz)
    assert segments.size(5) == 10 and segments.size(25) == 20  # a checkpoint at every end


def test_sigterm_in_a_storage_write_stops_between_iterations_and_resumes(tmp_path, monkeypatch):
    """openmmtools defers a signal that arrives while it writes an iteration, then calls the handler
    it replaced; SIGTERM's default one is not callable there, so the run holds a Python handler: the
    run stops after that iteration (KeyboardInterrupt, what the CLI turns into exit code 130) and
    resumes to the frames asked for."""
    import os
    import signal

    from bgp4.simulation._remd_storage import SegmentReporter

    settings = replace(TINY, frames=30, equilibration_ps=0.0)
    out, calls = tmp_path / "term.h5", []
    stamp = SegmentReporter.write_timestamp

    def stamp_and_signal(self, iteration):
        calls.append(iteration)
        if len(calls) == 12:
            os.kill(os.getpid(), signal.SIGTERM)  # inside openmmtools' delayed-termination block
        return stamp(self, iteration)

    before = signal.getsignal(signal.SIGTERM)
    with monkeypatch.context() as patch:
        patch.setattr(SegmentReporter, "write_timestamp", stamp_and_signal)
        with pytest.raises(KeyboardInterrupt):
            simulate(out, settings, progress=False)
    assert signal.getsignal(signal.SIGTERM) is before and not out.exists()
    simulate(out, settings, progress=False)
    assert load_trajectory(out).n_frames == 30


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--replica-exchange", "600:300:4", "--temperature", "600"], "must increase"),
        (["--replica-exchange", "300:300:4", "--temperature", "300"], "must increase"),
        (["--replica-exchange", "300-600-8", "--temperature", "300"], "TMIN:TMAX:N"),
        (["--replica-exchange", "300:600:eight", "--temperature", "300"], "TMIN:TMAX:N"),
        (["--replica-exchange", "300:600:1", "--temperature", "300"], "at least 2"),
        (["--replica-exchange", "300:600:8"], "temperature (--temperature) is 600 K"),
        (["--replica-exchange", "300:600:8", "--temperature", "300", "--replicas", "2"], "--replicas"),
        (["--replica-exchange", "300:600:8", "--temperature", "300", "--constraints", "none", "--timestep-fs", "2"],
         "too long"),
        (["--velocity-refresh", "exchange"], "is for replica exchange"),
        (["--replica-exchange", "300:600:8", "--temperature", "300", "--velocity-refresh", "never"],
         "must be iteration or exchange"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_code_2_with_nothing_written(tmp_path, cli, flags, message):
    out = tmp_path / "bad.h5"
    done = cli("simulate", "--out", out, "--frames", "10", *flags)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def _partial_iterations(work: Path) -> int:
    """Iterations that sealed segments hold (read from their markers)."""
    return sum(json.loads(p.read_text())["iterations"] for p in work.glob("segment-*/done.json"))


@pytest.mark.slow
def test_resume_after_sigkill_keeps_sealed_segments_and_ends_with_the_frames_asked_for(tmp_path):
    out, work = tmp_path / "kill.h5", tmp_path / "kill.h5.partial"
    args = [sys.executable, "-m", "bgp4.cli", "simulate", "--out", str(out), "--frames", "1500", "--quiet"]
    args += ["--temperature", "300", "--replica-exchange", "300:600:3", "--save-every", "10"]
    args += ["--equilibration-ps", "0.1", "--constraints", "none"]
    proc = subprocess.Popen(args, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while _partial_iterations(work) < 1000 and proc.poll() is None:
        assert time.time() < deadline, "the first segment was not sealed within 300 s"
        time.sleep(0.05)
    time.sleep(np.random.default_rng(0).uniform(0.0, 1.0))  # somewhere in the next segment
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists() and _partial_iterations(work) >= 1000
    finished = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    data = load_trajectory(out)
    assert data.n_frames == 1500 and not work.exists()
    assert np.allclose(mdtraj.load(str(out)).time, np.arange(1, 1501) * 0.01)
    # the sealed first segment is kept as it was; the rest is a valid continuation, not the same
    # numbers (openmmtools reseeds its streams on resume: docs/design/resume.md)
    unbroken = tmp_path / "unbroken.h5"
    done = subprocess.run([*args[:5], str(unbroken), *args[6:]], cwd=tmp_path, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(data.xyz[:1000], load_trajectory(unbroken).xyz[:1000])


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


def test_umbrella_mbar_recovers_a_known_p_phi_positive():
    """run/scripts/umbrella_phi.py's MBAR step on exact samples of a known density on the circle,
    each window's drawn under its own bias: P(phi > 0) comes back within its error."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "run" / "scripts" / "umbrella_phi.py"
    spec = importlib.util.spec_from_file_location("umbrella_phi", path)
    umbrella = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(umbrella)

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
