"""Throughput of OpenMMEnergy against bare OpenMM contexts, side by side on the same frames.

Prints `name: value` lines: evaluations/s (energy + forces) of OpenMMEnergy through torch autograd
(`reduced_energy` + backward) and through `reduced_energies_forces` (numpy), of two bare processes
with one context each, and `energy_efficiency` = autograd throughput / bare throughput. Measurements are
interleaved and repeated; the best of each is kept, since other programs share the cores.
The autograd path runs torch ops around each call; with torch's default OpenMP threads their
spin-waiting takes a few % of the cores from the workers (compare --torch-threads 1).

Usage: python run/bench/bench_energy.py [--frames 4096] [--reps 7] [--workers 2] [--platform auto]
       [--torch-threads N]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np
import openmm

# Heavy imports (torch, bgp4) stay inside main(): spawned bare workers re-import this module.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def md_frames(system: openmm.System, positions: np.ndarray, n_frames: int, seed: int = 7) -> np.ndarray:
    """(n_frames, n_atoms, 3) float64 nm from short 600 K Langevin MD on the Reference platform."""
    integrator = openmm.LangevinMiddleIntegrator(600.0, 1.0, 0.002)
    integrator.setRandomNumberSeed(seed)
    context = openmm.Context(system, integrator, openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(positions)
    openmm.LocalEnergyMinimizer.minimize(context)
    context.setVelocitiesToTemperature(600.0, seed)
    integrator.step(1000)
    frames = []
    for _ in range(n_frames):
        integrator.step(5)
        frames.append(context.getState(getPositions=True).getPositions(asNumpy=True)._value)
    return np.asarray(frames, dtype=np.float64)


def bare_worker(xml: str, platform_name: str, props: dict, frames: np.ndarray, conn) -> None:
    """One bare context: on each b'go', evaluate all frames (same per-frame calls as the workers)."""
    context = openmm.Context(
        openmm.XmlSerializer.deserialize(xml),
        openmm.VerletIntegrator(0.001),
        openmm.Platform.getPlatformByName(platform_name),
        props,
    )
    energies = np.empty(len(frames))
    forces = np.empty(frames.shape)
    conn.send("ready")
    while conn.recv() == "go":
        for i in range(len(frames)):
            context.setPositions(frames[i])
            state = context.getState(getEnergy=True, getForces=True)
            energies[i] = state.getPotentialEnergy()._value
            forces[i] = state.getForces(asNumpy=True)._value
        conn.send(float(energies.sum()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--platform", default="auto")
    parser.add_argument("--torch-threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    args = parser.parse_args()

    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)

    from bgp4.platform import get_platform
    from bgp4.simulation.energy import OpenMMEnergy
    from bgp4.simulation.molecule import get_molecule

    molecule = get_molecule()
    t0 = time.perf_counter()
    frames = md_frames(molecule.system, molecule.positions, args.frames)
    print(f"setup_md_s: {time.perf_counter() - t0:.2f}")
    platform, props = get_platform(args.platform, molecule.n_atoms)
    xml = molecule.system_xml()

    spawn = mp.get_context("spawn")
    conns, procs = [], []
    for part in np.array_split(frames, args.workers):
        parent_end, child_end = spawn.Pipe()
        proc = spawn.Process(target=bare_worker, args=(xml, platform.getName(), props, part, child_end), daemon=True)
        proc.start()
        conns.append(parent_end)
        procs.append(proc)
    for conn in conns:
        assert conn.recv() == "ready"

    def run_bare() -> float:
        start = time.perf_counter()
        for conn in conns:
            conn.send("go")
        for conn in conns:
            conn.recv()
        return time.perf_counter() - start

    x = torch.from_numpy(frames.reshape(len(frames), -1).copy())
    best = {"bare": np.inf, "autograd": np.inf, "numpy": np.inf}
    with OpenMMEnergy(molecule.system, 600.0, n_workers=args.workers, platform=args.platform) as energy:

        def run_autograd() -> float:
            start = time.perf_counter()
            xg = x.clone().requires_grad_(True)
            energy.reduced_energy(xg).sum().backward()
            return time.perf_counter() - start

        def run_numpy() -> float:
            start = time.perf_counter()
            energy.reduced_energies_forces(frames)
            return time.perf_counter() - start

        for _ in range(args.reps):  # interleaved, so load from other programs hits all alike
            for name, fn in (("bare", run_bare), ("autograd", run_autograd), ("numpy", run_numpy)):
                best[name] = min(best[name], fn())
    for conn in conns:
        conn.send("stop")
    for proc in procs:
        proc.join(5)

    rate = {name: len(frames) / seconds for name, seconds in best.items()}
    print(f"platform: {platform.getName()}")
    print(f"workers: {args.workers}")
    print(f"torch_threads: {torch.get_num_threads()}")
    print(f"frames: {len(frames)}")
    print(f"openmm_energy_evals_per_s: {rate['autograd']:.0f}")
    print(f"openmm_energy_numpy_evals_per_s: {rate['numpy']:.0f}")
    print(f"bare_evals_per_s: {rate['bare']:.0f}")
    print(f"energy_efficiency: {rate['autograd'] / rate['bare']:.3f}")
    print(f"energy_efficiency_numpy: {rate['numpy'] / rate['bare']:.3f}")


if __name__ == "__main__":
    main()
