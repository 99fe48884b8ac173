"""Peak memory and time of AIS refinement against the sample batch size, with and without
evaluating the flow in slices of rows (`bgp4.generator.rows.ROWS`).

Each case runs `bgp4.generator.sample.refine_run` on a trained run's generator in a fresh Python
process (n samples, K levels of independence moves only, as `bgp4 sample --refine K
--refine-steps 0`), into a scratch directory, and reports that process's peak resident memory
(`wait4`'s ru_maxrss) and wall time. `--rows 0` evaluates each batch whole, as bgp4 did before
slices.

Usage: python run/bench/bench_memory.py RUN [--n 20000] [--levels 48] [--batches 1000,10000] [--rows 0,2048]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main", "peak_gib"]

_CHILD = """
import sys, torch
import bgp4.generator.rows as rows
from bgp4.generator.sample import refine_run
from bgp4.settings import RefineSettings, SampleSettings
run, out, n, batch, levels, slice_rows = sys.argv[1:7]
torch.set_num_threads(1)
rows.ROWS = int(slice_rows) or 1 << 62
s = SampleSettings(n=int(n), batch=int(batch), workers=1, device="cpu", seed=0)
summary, _ = refine_run(run, s, RefineSettings(levels=int(levels), steps=0), out=out, progress=False)
print(f"reverse ESS {summary.get('reverse_ess')}")
"""


def peak_gib(argv: list[str]) -> tuple[float, float, str]:
    """(peak RSS GiB, wall s, last line printed) of one child process running `argv`."""
    started = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"case failed ({child.returncode}):\n{output}")
    lines = [line for line in output.splitlines() if line.strip()]
    return usage.ru_maxrss / 2**20, time.perf_counter() - started, lines[-1] if lines else ""


def main() -> None:
    """Run every (batch, rows) case in a fresh process and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--levels", type=int, default=48)
    parser.add_argument("--batches", default="1000,10000")
    parser.add_argument("--rows", default="0,2048", help="slice sizes; 0: whole batches")
    a = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"  # the children inherit it
    print(f"refine n={a.n}, K={a.levels} independence moves, 1 thread, 1 energy process; run {a.run}")
    print(f"{'batch':>7} {'rows':>7} {'peak GiB':>9} {'wall s':>7}  result")
    with tempfile.TemporaryDirectory() as scratch:
        for batch in map(int, a.batches.split(",")):
            for rows in map(int, a.rows.split(",")):
                out = Path(scratch) / f"b{batch}-r{rows}.h5"
                case = [a.run, out, a.n, batch, a.levels, rows]
                gib, wall, last = peak_gib([sys.executable, "-c", _CHILD, *map(str, case)])
                print(f"{batch:>7} {rows or 'whole':>7} {gib:>9.2f} {wall:>7.1f}  {last}", flush=True)


if __name__ == "__main__":
    main()
