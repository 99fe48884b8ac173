"""What openmmtools' per-iteration rewrite of the MCMC moves costs a dense replica exchange.

The same short 300 K alanine dipeptide run (no constraints, `300:600:4`, 100-step iterations with
`--velocity-refresh exchange`: a frame every 0.1 ps) with bgp4's storage (`SegmentReporter`, which
writes unchanged moves once) and with openmmtools' plain `MultiStateReporter` (YAML of every move
after every iteration), alternated, each in a fresh process; prints the wall times, their ratio and
whether the two files hold the same frames bit for bit.

    python run/bench/bench_remd_storage.py [--frames 3000] [--rounds 2] [--workdir DIR]   # about 7 min on one core
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["run_seconds", "main"]

_ONE = """
import sys
from bgp4.simulation.md import MDSettings, simulate

if sys.argv[2] == "plain":  # openmmtools' own write of the moves, after every iteration
    from openmmtools.multistate import MultiStateReporter

    from bgp4.simulation._remd_storage import SegmentReporter

    SegmentReporter.write_mcmc_moves = MultiStateReporter.write_mcmc_moves
settings = MDSettings(
    frames=int(sys.argv[3]), save_every=100, temperature=300.0, constraints="none", replica_exchange="300:600:4",
    equilibration_ps=0.0, velocity_refresh="exchange",
)
simulate(sys.argv[1], settings, progress=False)
"""


def run_seconds(out: Path, storage: str, frames: int) -> float:
    """Wall seconds of one replica-exchange run in a fresh process; storage: 'segment' or 'plain'."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", _ONE, str(out), storage, str(frames)], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=3000, help="iterations (frames at 300 K) per run")
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the two storages")
    parser.add_argument("--workdir", type=Path, help="where the runs write (default: a temporary directory)")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp())
    times: dict[str, list[float]] = {"plain": [], "segment": []}
    for k in range(args.rounds):
        for storage in times:
            out = work / f"{storage}-{k}.h5"
            times[storage].append(run_seconds(out, storage, args.frames))
            print(f"round {k}: {storage:8s} {times[storage][-1]:7.1f} s", flush=True)
    from bgp4.simulation.data import load_trajectory

    plain, segment = (load_trajectory(work / f"{s}-0.h5") for s in ("plain", "segment"))
    same = np.array_equal(plain.xyz, segment.xyz) and np.array_equal(plain.energies, segment.energies)
    best = {s: min(t) for s, t in times.items()}
    print(
        f"best of {args.rounds}: plain {best['plain']:.1f} s, segment {best['segment']:.1f} s, "
        f"speed-up {best['plain'] / best['segment']:.3f}x; same frames bit for bit: {same}"
    )


if __name__ == "__main__":
    main()
