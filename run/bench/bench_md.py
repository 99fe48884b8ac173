"""Aggregate MD throughput of `bgp4 simulate` against bare OpenMM contexts on the same cores.

Bare: one process per replica, each a Context on the same system, integrator and platform,
stepping in a plain `integrator.step` loop (nothing saved). bgp4: `simulate` with the same
replicas, saving positions and energies every `save_every` steps, timed end to end (process
start, minimization and file assembly included; equilibration set to 0 so both do the same
steps). Prints `md_efficiency: <bgp4 steps/s / bare steps/s>`; target >= 0.85.

    python run/bench/bench_md.py [--frames 200000] [--replicas 2] [--platform auto] [--molecule alanine-tetrapeptide]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["bare_steps_per_s", "simulate_steps_per_s", "main"]

# Spawned bare workers re-import this module: they find bgp4 from a plain checkout too.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _bare(steps: int, platform: str, molecule_name: str, barrier, results) -> None:
    import openmm

    from bgp4.platform import get_platform, slow_on_reference
    from bgp4.simulation.molecule import get_molecule

    molecule = get_molecule(molecule_name)
    integrator = openmm.LangevinMiddleIntegrator(600.0, 1.0, 0.002)
    # as `bgp4 simulate` resolves auto
    plat, props = get_platform(platform, molecule.n_atoms, slow_on_reference(molecule.system))
    context = openmm.Context(molecule.system, integrator, plat, props)
    context.setPositions(molecule.positions)
    openmm.LocalEnergyMinimizer.minimize(context)
    context.setVelocitiesToTemperature(600.0, 1)
    integrator.step(1000)
    barrier.wait()
    start = time.perf_counter()
    integrator.step(steps)
    results.put(time.perf_counter() - start)


def bare_steps_per_s(steps_per_replica: int, replicas: int, platform: str, molecule: str = "") -> float:
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(replicas), ctx.Queue()
    args = (steps_per_replica, platform, molecule, barrier, results)
    procs = [ctx.Process(target=_bare, args=args) for _ in range(replicas)]
    for p in procs:
        p.start()
    times = [results.get() for _ in procs]
    for p in procs:
        p.join()
    return replicas * steps_per_replica / max(times)


def simulate_steps_per_s(frames: int, replicas: int, platform: str, save_every: int, molecule: str = "") -> float:
    from bgp4.simulation.md import MDSettings, simulate

    with tempfile.TemporaryDirectory() as tmp:
        settings = MDSettings(
            frames=frames,
            replicas=replicas,
            platform=platform,
            equilibration_ps=0.0,
            save_every=save_every,
            molecule=molecule,
        )
        start = time.perf_counter()
        simulate(Path(tmp) / "bench.h5", settings, progress=False)
        return frames * save_every / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=200_000)
    parser.add_argument("--replicas", type=int, default=mp.cpu_count())
    parser.add_argument("--platform", default="auto")
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--molecule", default="", help="built-in name or sequence:SEQ (default: alanine dipeptide)")
    args = parser.parse_args()
    steps = args.frames * args.save_every
    bare = bare_steps_per_s(steps // args.replicas, args.replicas, args.platform, args.molecule)
    ours = simulate_steps_per_s(args.frames, args.replicas, args.platform, args.save_every, args.molecule)
    print(f"molecule: {args.molecule or 'alanine-dipeptide'}")
    print(f"replicas: {args.replicas}")
    print(f"platform: {args.platform}")
    print(f"bare_steps_per_s: {bare:.0f}")
    print(f"simulate_steps_per_s: {ours:.0f}")
    print(f"simulate_frames_per_s: {ours / args.save_every:.0f}")
    print(f"projected_500k_frames_min: {500_000 * args.save_every / ours / 60:.1f}")
    print(f"md_efficiency: {ours / bare:.3f}")


if __name__ == "__main__":
    main()
