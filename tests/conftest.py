"""Shared fixtures: the molecule, a short real 600 K MD trajectory (plain OpenMM), the CLI in-process."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import openmm
import pytest

from bgp4.simulation.molecule import alanine_dipeptide


@pytest.fixture(scope="session")
def molecule():
    return alanine_dipeptide()


@pytest.fixture(scope="session")
def md_frames(molecule):
    """3,000 frames of 600 K Langevin MD (Reference platform), (n, 22, 3) float64 nm, and energies in kJ/mol."""
    integrator = openmm.LangevinMiddleIntegrator(600.0, 1.0, 0.002)
    integrator.setRandomNumberSeed(1234)
    context = openmm.Context(molecule.system, integrator, openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(molecule.positions)
    openmm.LocalEnergyMinimizer.minimize(context)
    context.setVelocitiesToTemperature(600.0, 1234)
    integrator.step(5000)
    frames, energies = [], []
    for _ in range(3000):
        integrator.step(10)
        state = context.getState(getPositions=True, getEnergy=True)
        frames.append(state.getPositions(asNumpy=True).value_in_unit(openmm.unit.nanometer))
        energies.append(state.getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole))
    return np.asarray(frames, dtype=np.float64), np.asarray(energies, dtype=np.float64)


@pytest.fixture
def cli():
    """Run `bgp4 ARGS` in this process (no interpreter start-up); returns returncode, stdout, stderr.

    An exception the CLI let through (what a user would see as a traceback) fails the test.
    """
    from typer.testing import CliRunner

    from bgp4.cli import app

    def run(*args: str) -> SimpleNamespace:
        result = CliRunner().invoke(app, [str(a) for a in args])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return SimpleNamespace(returncode=result.exit_code, stdout=result.stdout, stderr=result.stderr)

    return run
