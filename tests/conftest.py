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


def langevin_frames(molecule, seed: int, n: int, every: int, equilibrate: int, minimize: bool = True):
    """n frames of 600 K Langevin MD of `molecule` (Reference platform, 2 fs), `every` steps apart
    after `equilibrate` steps: positions (n, atoms, 3) float64 nm and energies (n,) kJ/mol."""
    integrator = openmm.LangevinMiddleIntegrator(600.0, 1.0, 0.002)
    integrator.setRandomNumberSeed(seed)
    context = openmm.Context(molecule.system, integrator, openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(molecule.positions)
    if minimize:
        openmm.LocalEnergyMinimizer.minimize(context)
    context.setVelocitiesToTemperature(600.0, seed)
    integrator.step(equilibrate)
    frames, energies = [], []
    for _ in range(n):
        integrator.step(every)
        state = context.getState(getPositions=True, getEnergy=True)
        frames.append(state.getPositions(asNumpy=True).value_in_unit(openmm.unit.nanometer))
        energies.append(state.getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole))
    return np.asarray(frames, dtype=np.float64), np.asarray(energies, dtype=np.float64)


@pytest.fixture(scope="session")
def langevin():
    """`langevin_frames`, for test modules that simulate another molecule."""
    return langevin_frames


@pytest.fixture(scope="session")
def md_frames(molecule):
    """3,000 frames of 600 K Langevin MD (Reference platform), (n, 22, 3) float64 nm, and energies in kJ/mol."""
    return langevin_frames(molecule, seed=1234, n=3000, every=10, equilibrate=5000)


@pytest.fixture(scope="session")
def md_file(tmp_path_factory):
    """A `bgp4 simulate` file: 3,000 frames of two 600 K replicas (seeded)."""
    from bgp4.simulation.md import MDSettings, simulate

    path = tmp_path_factory.mktemp("data") / "ala2.h5"
    simulate(path, MDSettings(frames=3000, equilibration_ps=2.0, replicas=2, seed=11), progress=False)
    return path


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


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch on one thread for a module of toy-sized batches (`pytest.mark.usefixtures`)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
