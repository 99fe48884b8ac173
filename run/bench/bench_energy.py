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
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import openmm

if TYPE_CHECKING:  # for the annotations only: at run time these are imported where they are used
    import torch

    from bgp4.simulation.energy import OpenMMEnergy

# Heavy imports (torch, bgp4) stay inside the functions: spawned bare workers re-import this module.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

__all__ = [
    "bare_worker",
    "best_times",
    "main",
    "md_frames",
    "parse_args",
    "print_rates",
    "run_autograd",
    "run_bare",
    "run_numpy",
    "start_bare_workers",
    "stop_bare_workers",
]


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


def parse_args() -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--platform", default="auto")
    parser.add_argument("--torch-threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    return parser.parse_args()


def start_bare_workers(
    xml: str, platform_name: str, props: dict, frames: np.ndarray, n_workers: int
) -> tuple[list[Connection], list[BaseProcess]]:
    """Spawn `n_workers` bare contexts, each holding its share of the frames; returns once all are ready."""
    spawn = mp.get_context("spawn")
    conns, procs = [], []
    for part in np.array_split(frames, n_workers):
        parent_end, child_end = spawn.Pipe()
        proc = spawn.Process(target=bare_worker, args=(xml, platform_name, props, part, child_end), daemon=True)
        proc.start()
        conns.append(parent_end)
        procs.append(proc)
    for conn in conns:
        assert conn.recv() == "ready"
    return conns, procs


def stop_bare_workers(conns: list[Connection], procs: list[BaseProcess]) -> None:
    for conn in conns:
        conn.send("stop")
    for proc in procs:
        proc.join(5)


def run_bare(conns: list[Connection]) -> float:
    """Wall time of one pass of the bare workers over all frames."""
    start = time.perf_counter()
    for conn in conns:
        conn.send("go")
    for conn in conns:
        conn.recv()
    return time.perf_counter() - start


def run_autograd(energy: OpenMMEnergy, x: torch.Tensor) -> float:
    """Wall time of `reduced_energy` + backward on x (n, n_atoms * 3)."""
    start = time.perf_counter()
    xg = x.clone().requires_grad_(True)
    energy.reduced_energy(xg).sum().backward()
    return time.perf_counter() - start


def run_numpy(energy: OpenMMEnergy, frames: np.ndarray) -> float:
    """Wall time of `reduced_energies_forces` on the frames."""
    start = time.perf_counter()
    energy.reduced_energies_forces(frames)
    return time.perf_counter() - start


def best_times(
    system: openmm.System, frames: np.ndarray, conns: list[Connection], args: argparse.Namespace
) -> dict[str, float]:
    """The shortest wall time of each way ("bare", "autograd", "numpy") over --reps interleaved rounds."""
    import torch

    from bgp4.simulation.energy import OpenMMEnergy

    x = torch.from_numpy(frames.reshape(len(frames), -1).copy())
    best = {"bare": np.inf, "autograd": np.inf, "numpy": np.inf}
    with OpenMMEnergy(system, 600.0, n_workers=args.workers, platform=args.platform) as energy:
        timers = (
            ("bare", lambda: run_bare(conns)),
            ("autograd", lambda: run_autograd(energy, x)),
            ("numpy", lambda: run_numpy(energy, frames)),
        )
        for _ in range(args.reps):  # interleaved, so load from other programs hits all alike
            for name, fn in timers:
                best[name] = min(best[name], fn())
    return best


def print_rates(best: dict[str, float], n_frames: int, platform_name: str, workers: int, torch_threads: int) -> None:
    """The `name: value` lines: throughputs (evaluations/s) and their ratios to the bare one."""
    rate = {name: n_frames / seconds for name, seconds in best.items()}
    print(f"platform: {platform_name}")
    print(f"workers: {workers}")
    print(f"torch_threads: {torch_threads}")
    print(f"frames: {n_frames}")
    print(f"openmm_energy_evals_per_s: {rate['autograd']:.0f}")
    print(f"openmm_energy_numpy_evals_per_s: {rate['numpy']:.0f}")
    print(f"bare_evals_per_s: {rate['bare']:.0f}")
    print(f"energy_efficiency: {rate['autograd'] / rate['bare']:.3f}")
    print(f"energy_efficiency_numpy: {rate['numpy'] / rate['bare']:.3f}")


def main() -> None:
    """Time OpenMMEnergy and the bare contexts on the same MD frames and print the throughputs."""
    args = parse_args()

    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)

    from bgp4.platform import get_platform, slow_on_reference
    from bgp4.simulation.molecule import get_molecule

    molecule = get_molecule()
    t0 = time.perf_counter()
    frames = md_frames(molecule.system, molecule.positions, args.frames)
    print(f"setup_md_s: {time.perf_counter() - t0:.2f}")
    platform, props = get_platform(args.platform, molecule.n_atoms, slow_on_reference(molecule.system))
    conns, procs = start_bare_workers(molecule.system_xml(), platform.getName(), props, frames, args.workers)
    best = best_times(molecule.system, frames, conns, args)
    stop_bare_workers(conns, procs)
    print_rates(best, len(frames), platform.getName(), args.workers, torch.get_num_threads())


if __name__ == "__main__":
    main()
