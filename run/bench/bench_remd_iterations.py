"""What short replica-exchange iterations cost (`bgp4 simulate --velocity-refresh exchange`).

The same 0.2 ns of 300 K alanine dipeptide (no constraints, `300:600:4`) as 100-step iterations
(2,000 frames, one every 0.1 ps) and as 500-step ones (400 frames), after a short warm-up run
(imports, compilation); prints each wall time and their ratio: the cost per nanosecond of keeping
five times the frames.

    python run/bench/bench_remd_iterations.py [--ns 0.2] [--workdir DIR]   # about 2-4 min on one core
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["simulate_seconds", "main"]


def simulate_seconds(out: Path, save_every: int, frames: int) -> float:
    """Wall seconds of one `bgp4 simulate` replica-exchange run (1 fs steps, no equilibration)."""
    args = [sys.executable, "-m", "bgp4.cli", "simulate", "--out", str(out), "--temperature", "300"]
    args += ["--constraints", "none", "--replica-exchange", "300:600:4", "--frames", str(frames)]
    args += ["--save-every", str(save_every), "--equilibration-ps", "0", "--velocity-refresh", "exchange"]
    start = time.perf_counter()
    subprocess.run([*args, "--overwrite", "--quiet"], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ns", type=float, default=0.2, help="MD per run (ns at 1 fs)")
    parser.add_argument("--workdir", type=Path, help="where the runs write (default: a temporary directory)")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp())
    work.mkdir(parents=True, exist_ok=True)
    steps = int(round(args.ns * 1e6))
    simulate_seconds(work / "warmup.h5", 500, 40)
    wall = {}
    for every in (100, 500):
        wall[every] = simulate_seconds(work / f"r{every}.h5", every, steps // every)
        print(f"--save-every {every}: {steps // every} frames of {args.ns:g} ns in {wall[every]:.1f} s")
    print(f"cost of 100-step iterations per ns: {wall[100] / wall[500]:.2f} x that of 500-step ones")


if __name__ == "__main__":
    main()
