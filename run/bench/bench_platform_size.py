"""Which OpenMM platform steps a molecule fastest on one CPU core, by its size.

Reference is the fastest for alanine dipeptide (22 atoms). Its nonbonded loop is O(N^2) in double
precision, so a larger molecule runs faster on the CPU platform (one thread, as bgp4 runs it);
this bench set `bgp4.platform.AUTO_CPU_ATOMS`, where `--platform auto` turns from one to the other. This bench builds
capped alanine peptides of growing length in bgp4's default system (amber99sb-ildn, OBC, NoCutoff,
X-H bonds constrained), runs Langevin MD at 600 K on each platform and prints steps per second.

    python run/bench/bench_platform_size.py [--residues 1 3 5 10 20] [--seconds 3]
"""

from __future__ import annotations

import argparse
import time

import openmm
import openmm.unit as unit

from bgp4.platform import get_platform
from bgp4.simulation.molecule import get_molecule

__all__ = ["steps_per_second", "main"]


def steps_per_second(system: openmm.System, positions, platform: str, seconds: float) -> float:
    """Langevin steps (2 fs, 600 K) per wall second on `platform` (bgp4's properties: one CPU thread)."""
    integrator = openmm.LangevinMiddleIntegrator(600 * unit.kelvin, 1.0 / unit.picosecond, 0.002 * unit.picoseconds)
    integrator.setRandomNumberSeed(1)
    chosen, props = get_platform(platform)
    context = openmm.Context(system, integrator, chosen, props)
    context.setPositions(positions)
    openmm.LocalEnergyMinimizer.minimize(context, maxIterations=200)
    integrator.step(200)  # warm-up
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        integrator.step(500)
        steps += 500
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--residues", type=int, nargs="+", default=[1, 3, 5, 10, 20], help="alanines per peptide")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed MD per platform and size")
    args = parser.parse_args()
    print("| alanines | atoms | Reference (steps/s) | CPU, 1 thread (steps/s) | CPU / Reference |")
    print("|---|---|---|---|---|")
    for n in args.residues:
        molecule = get_molecule(f"sequence:{'A' * n}")
        rates = [steps_per_second(molecule.system, molecule.positions, p, args.seconds) for p in ("Reference", "CPU")]
        print(f"| {n} | {molecule.n_atoms} | {rates[0]:.0f} | {rates[1]:.0f} | {rates[1] / rates[0]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
