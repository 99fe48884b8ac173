"""Mean potential energy of alanine dipeptide (OBC, no constraints) at 300 K under three Langevin kernels
(LangevinMiddle, 1 fs, 1/ps, Reference platform), no exchanges:

- plain: continuous dynamics, as plain `bgp4 simulate`;
- redraw: velocities redrawn with OpenMM's setVelocitiesToTemperature every 500 steps, as bgp4's
  replica-exchange move did before 2280ddb;
- refresh (logged as midref2): Maxwell-Boltzmann velocities in place of the stored post-friction
  ones with the last half drift redone, as `bgp4.simulation._remd_move.refresh_velocities` does.

    python redraw_kernel.py DATA.h5 MODE NS [SEED]     # DATA.h5: any bgp4 file of the dipeptide's system

Prints the mean potential energy (kJ/mol) with a 20-block standard error. The runs of the study are
in redraw_kernel.log (started from the first frame of ala2-300K-remd.h5, 20 ps of equilibration).
"""

import sys
import time

import numpy as np
import openmm
from openmm import unit

from bgp4.simulation.data import load_trajectory

path, mode, ns = sys.argv[1], sys.argv[2], float(sys.argv[3])
data = load_trajectory(path)
system = data.molecule().system
integrator = openmm.LangevinMiddleIntegrator(300, 1.0, 0.001)
integrator.setRandomNumberSeed(int(sys.argv[4]) if len(sys.argv) > 4 else 7)
context = openmm.Context(system, integrator, openmm.Platform.getPlatformByName("Reference"))
context.setPositions(data.xyz[0].astype(float))
context.setVelocitiesToTemperature(300, 3)
integrator.step(20000)
rng = np.random.default_rng(5)
masses = np.array([system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(system.getNumParticles())])
sd = np.sqrt(300 * 0.0083144626 / masses)[:, None]  # nm/ps
energies, started = [], time.time()
for _ in range(int(ns * 2000)):
    if mode == "redraw":
        context.setVelocitiesToTemperature(300 * unit.kelvin, int(rng.integers(1, 2**31 - 1)))
    elif mode == "refresh":
        state = context.getState(getPositions=True, getVelocities=True)
        x, v_old = state.getPositions(asNumpy=True)._value, state.getVelocities(asNumpy=True)._value
        v_new = rng.normal(size=x.shape) * sd
        context.setVelocities(v_new)
        context.setPositions(x + 0.0005 * (v_new - v_old))
    integrator.step(500)
    energies.append(context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole))
e = np.array(energies)
blocks = e[: len(e) // 20 * 20].reshape(20, -1).mean(1)
se = blocks.std(ddof=1) / np.sqrt(20)
print(mode, ns, "ns: mean", e.mean(), "se", se, "std", e.std(), f"{time.time() - started:.0f}s")
