"""Replica exchange's Langevin move: velocity refresh every iteration or after an exchange, its moves stored once."""

from __future__ import annotations

import contextlib
import io
from dataclasses import replace

import numpy as np
import openmm
import pytest
from _remd_helpers import TINY

from bgp4.errors import InputError
from bgp4.simulation import remd
from bgp4.simulation.data import load_trajectory, read_settings
from bgp4.simulation.md import MDSettings, completed, simulate


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
