"""The MCMC move of bgp4's replica exchange: openmmtools' Langevin dynamics, seeded.

A module of its own because it subclasses an openmmtools class, so importing it imports
openmmtools (about a second, with numba and pymbar): `bgp4.simulation.remd` stays light and
imports this only when a run starts. openmmtools stores the move in its netCDF file by module and
class name and imports this module again when a run resumes (`from_storage`).
"""

from __future__ import annotations

import numpy as np
from openmmtools import mcmc

__all__ = ["SeededLangevinMove", "draw_seed"]


def draw_seed() -> int:
    """A positive int32 OpenMM seed from numpy's global random state, the state openmmtools'
    replica mixing draws from too: seeding that one state (`bgp4.simulation.remd`) seeds the run."""
    return int(np.random.randint(1, 2**31 - 1))


class SeededLangevinMove(mcmc.LangevinDynamicsMove):
    """openmmtools' `LangevinDynamicsMove` (OpenMM's LangevinMiddleIntegrator, as plain `bgp4
    simulate` uses) with fresh Maxwell-Boltzmann velocities at the replica's temperature before
    every propagation, both seeded.

    The parent's `reassign_velocities=True` draws velocities with an unseeded OpenMM call and leaves
    the integrator's seed at 0 (OpenMM then picks one at random), so a run could not be repeated.
    Here the parent's reassignment stays off (`reassign_velocities` reads False in the stored move)
    and the `_before_integration` hook draws the velocities instead, with a seed from `draw_seed`;
    the integrator gets one too (it matters when openmmtools' context cache creates the context).
    Velocities must be redrawn: a configuration that moved to another temperature by an exchange
    would otherwise carry the kinetic energy of its old one.
    """

    def __init__(self, **kwargs):
        kwargs["reassign_velocities"] = False  # the hook below reassigns them, seeded
        super().__init__(**kwargs)

    def _get_integrator(self, thermodynamic_state):
        integrator = super()._get_integrator(thermodynamic_state)
        integrator.setRandomNumberSeed(draw_seed())
        return integrator

    def _before_integration(self, context, thermodynamic_state):
        context.setVelocitiesToTemperature(thermodynamic_state.temperature, draw_seed())
