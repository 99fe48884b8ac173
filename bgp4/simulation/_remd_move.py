"""The MCMC move of bgp4's replica exchange: openmmtools' Langevin dynamics, seeded.

A module of its own because it subclasses an openmmtools class, so importing it imports
openmmtools (about a second, with numba and pymbar): `bgp4.simulation.remd` stays light and
imports this only when a run starts. openmmtools stores the move in its netCDF file by module and
class name and imports this module again when a run resumes (`from_storage`).
"""

from __future__ import annotations

import numpy as np
import openmm
from openmm import unit
from openmmtools import mcmc

from bgp4.simulation.ladder import REFRESH_DEFAULT, VELOCITY_REFRESH
from bgp4.simulation.molecule import kT

__all__ = ["SeededLangevinMove", "draw_seed", "note_temperature", "refresh_velocities"]


def draw_seed() -> int:
    """A positive int32 OpenMM seed from numpy's global random state, the state openmmtools'
    replica mixing draws from too: seeding that one state (`bgp4.simulation.remd`) seeds the run."""
    return int(np.random.randint(1, 2**31 - 1))


#: Attribute of an openmmtools SamplerState (one per walker, kept across iterations) holding the
#: temperature (K) of the walker's last propagation: the temperature its velocities belong to.
_LAST_TEMPERATURE = "_bgp4_last_temperature_K"


def note_temperature(sampler_state, kelvin: float) -> None:
    """Note on a walker's sampler state the temperature (K) its velocities belong to: that of its
    last propagation. `SeededLangevinMove` reads it to tell an exchanged walker from one that stayed."""
    setattr(sampler_state, _LAST_TEMPERATURE, float(kelvin))


class SeededLangevinMove(mcmc.LangevinDynamicsMove):
    """openmmtools' `LangevinDynamicsMove` (OpenMM's LangevinMiddleIntegrator, as plain `bgp4
    simulate` uses) with fresh Maxwell-Boltzmann velocities at the replica's temperature before
    every propagation, drawn as a full refresh of the integrator's own friction step; seeded.

    Velocities must be redrawn: a configuration that moved to another temperature by an exchange
    would otherwise carry the kinetic energy of its old one. But OpenMM 8.6's
    `setVelocitiesToTemperature` makes the on-step velocity Maxwell-Boltzmann (it stores
    v - dt/2 F/m), and LangevinMiddle's on-step velocity is not: its fast modes run cooler than kT
    (dt omega ~ 0.6 for the X-H stretches at 1 fs without constraints), so each redraw heats them.
    At 300 K, 1/ps friction and 500 steps per iteration the dipeptide's mean potential energy came
    out 0.7 kJ/mol above plain MD's (z = 7, run/results/benchmark-300K). The refresh here is instead
    the integrator's friction step with all memory lost (`refresh_velocities`): the stored velocity
    (the one after that step) is drawn Maxwell-Boltzmann, and the half drift that followed it is
    redone. Without constraints that is exactly a LangevinMiddle step at infinite friction: harmonic
    modes keep their exact sampling, and anharmonic ones differ from plain MD's only at the size of
    the integrator's own step error (its stationary state depends slightly on the friction). With
    constraints the redone drift is exact to first order.

    A walker that was just exchanged carries velocities of its old temperature; `apply` notes the
    temperature of each walker's last propagation on its sampler state (`note_temperature`) so that
    the refresh can scale them first. The storage does not keep the note: a sampler opened from it
    gets it again from the stored temperature assignment (`bgp4.simulation.remd`).

    With `refresh="exchange"` only a walker that comes from another temperature is refreshed; the
    others continue their Langevin trajectories as plain MD would, so an iteration may be short (a
    frame every 0.1 ps) without the redraws damping the dynamics.

    The parent's `reassign_velocities=True` draws velocities with an unseeded OpenMM call and leaves
    the integrator's seed at 0 (OpenMM then picks one at random), so a run could not be repeated.
    Here the parent's reassignment stays off (`reassign_velocities` reads False in the stored move)
    and the `_before_integration` hook draws the velocities instead, with a seed from `draw_seed`;
    the integrator gets one too (it matters when openmmtools' context cache creates the context).
    """

    def __init__(self, refresh: str = REFRESH_DEFAULT, **kwargs):
        if refresh not in VELOCITY_REFRESH:
            raise ValueError(f"refresh must be one of {VELOCITY_REFRESH}, got {refresh!r}")
        kwargs["reassign_velocities"] = False  # the hook below reassigns them, seeded
        super().__init__(**kwargs)
        self.refresh = refresh
        self._came_from: float | None = None

    def __getstate__(self):
        return {**super().__getstate__(), "refresh": self.refresh}

    def __setstate__(self, serialization):
        super().__setstate__(serialization)
        self.refresh = serialization.get("refresh", REFRESH_DEFAULT)  # moves stored before the option
        self._came_from = None

    def apply(self, thermodynamic_state, sampler_state, context_cache=None):
        # openmmtools exchanges thermodynamic states between walkers; a walker's sampler state
        # stays the same object, so it can remember where its velocities come from.
        self._came_from = getattr(sampler_state, _LAST_TEMPERATURE, None)
        super().apply(thermodynamic_state, sampler_state, context_cache=context_cache)
        note_temperature(sampler_state, thermodynamic_state.temperature.value_in_unit(unit.kelvin))

    def _get_integrator(self, thermodynamic_state):
        integrator = super()._get_integrator(thermodynamic_state)
        integrator.setRandomNumberSeed(draw_seed())
        return integrator

    def _before_integration(self, context, thermodynamic_state):
        kelvin = thermodynamic_state.temperature.value_in_unit(unit.kelvin)
        if self.refresh == "exchange" and self._came_from == kelvin:
            return  # the walker stayed: its trajectory goes on
        refresh_velocities(context, thermodynamic_state.temperature, draw_seed(), came_from=self._came_from)


def refresh_velocities(
    context: openmm.Context, temperature: unit.Quantity, seed: int, came_from: float | None = None
) -> None:
    """Maxwell-Boltzmann velocities at `temperature` (seeded by `seed`) for a LangevinMiddleIntegrator's
    `context`, in place of the velocity v after its friction step, with the half drift that followed
    that step redone at them: x += dt/2 (v_new - v) (nm; dt of the context's integrator).

    came_from: the temperature (K) the context's velocities belong to, if not `temperature` (a
    walker just exchanged). Their on-step part v + dt/2 F/m is then scaled by sqrt(T / came_from)
    before the half drift is undone, which maps the integrator's stationary state of one
    temperature onto the other's exactly for harmonic modes.
    """
    system, integrator = context.getSystem(), context.getIntegrator()
    kelvin = temperature.value_in_unit(unit.kelvin)
    exchanged = came_from is not None and came_from != kelvin
    old = context.getState(getPositions=True, getVelocities=True, getForces=exchanged)
    v_old = old.getVelocities(asNumpy=True).value_in_unit(unit.nanometer / unit.picosecond)
    masses = np.array([system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(system.getNumParticles())])
    inverse_mass = np.divide(1.0, masses, out=np.zeros_like(masses), where=masses > 0)[:, None]  # massless: 0
    half_dt = 0.5 * integrator.getStepSize().value_in_unit(unit.picosecond)
    if exchanged:
        kick = (
            half_dt * old.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer) * inverse_mass
        )
        v_old = np.sqrt(kelvin / came_from) * (v_old + kick) - kick
    v_new = np.random.default_rng(seed).standard_normal(v_old.shape) * np.sqrt(kT(kelvin) * inverse_mass)
    context.setPositions(old.getPositions(asNumpy=True).value_in_unit(unit.nanometer) + half_dt * (v_new - v_old))
    context.setVelocities(v_new)
    context.computeVirtualSites()
    if system.getNumConstraints():
        tolerance = integrator.getConstraintTolerance()
        context.applyConstraints(tolerance)
        context.applyVelocityConstraints(tolerance)
