"""Cost of one FAB AIS run (towards p^2/q) with MALA moves and with independence moves alone.

`bgp4 train --objective fab` spends most of a step in its AIS runs (run/results/
energy-training-from-best-ml). A MALA move needs the gradient in z, so a backward pass through
the flow for every evaluation; an independence move needs the flow's forward pass only, and
with no MALA moves at all (`--fab-moves 0`) the whole AIS run is forward passes. This times
`bgp4.generator.fab.FabSampler.run` on a trained run's generator for each setting, the settings
in alternation (`--repeats` rounds), so that other programs on the cores slow each alike. The
time of a run includes its last pass, which maps the final samples to flow coordinates and log q
(one forward pass, no energy), so ms per evaluation slightly overstates an evaluation's cost.
Each setting's step sizes start at `INITIAL_STEP` and adapt between its runs, so the first
round's AIS ESS is from unadapted MALA steps.

Prints one line per setting (`moves/independence`): the median seconds of an AIS run of n
samples, the target evaluations per sample, milliseconds per evaluation, and the mean ESS of the
AIS weights; then the speed-up of each setting over the first.

Usage: python run/bench/bench_fab_ais.py RUN [--n 2048] [--levels 8] [--settings 1/1 0/2]
    [--repeats 3] [--threads 0] [--workers 0]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_refine import frozen_run  # noqa: E402

from bgp4.generator.fab import FabSampler  # noqa: E402
from bgp4.simulation.energy import OpenMMEnergy  # noqa: E402

__all__ = ["time_settings", "main"]


def _setting(text: str) -> tuple[int, int]:
    moves, independence = (int(v) for v in text.split("/"))
    return moves, independence


def time_settings(bg, energy, settings, n: int, levels: int, repeats: int) -> dict:
    """{setting: (seconds of each run, evaluations per sample, AIS ESS of each run)}."""
    samplers = {s: FabSampler(levels, s[0], s[1]) for s in settings}
    times = {s: [] for s in settings}
    ess = {s: [] for s in settings}
    per_sample = {}
    gen = torch.Generator().manual_seed(0)
    for _ in range(repeats):
        for s, sampler in samplers.items():
            t0 = time.perf_counter()
            batch = sampler.run(bg, energy, n, gen)
            times[s].append(time.perf_counter() - t0)
            ess[s].append(batch.ais_ess)
            per_sample[s] = batch.evaluations / n
    return {s: (times[s], per_sample[s], ess[s]) for s in settings}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="run directory holding model.pt and complete.json")
    parser.add_argument("--n", type=int, default=2048, help="samples per AIS run (FAB's batch)")
    parser.add_argument("--levels", type=int, default=8, help="intermediate distributions (--fab-levels)")
    parser.add_argument(
        "--settings", type=_setting, nargs="+", default=[(1, 1), (0, 2)], help="MALA/independence moves per level"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    parser.add_argument("--workers", type=int, default=0, help="energy processes (0: one per core)")
    args = parser.parse_args()
    bg, temperature = frozen_run(args.run, args.threads)
    with OpenMMEnergy(bg.molecule().system, temperature, n_workers=args.workers or None) as energy:
        for moves, independence in args.settings:  # warm-up: workers, first forces, first backward pass
            FabSampler(1, moves, independence).run(bg, energy, 64, torch.Generator().manual_seed(1))
        results = time_settings(bg, energy, args.settings, args.n, args.levels, args.repeats)
    print(f"run: {args.run}  n: {args.n}  levels: {args.levels}  torch threads: {torch.get_num_threads()}")
    first = statistics.median(results[args.settings[0]][0])
    for (moves, independence), (times, per_sample, ess) in results.items():
        median = statistics.median(times)
        print(
            f"{moves}/{independence}: ais_run_s: {median:.2f}  evals_per_sample: {per_sample:.2f}"
            f"  ms_per_eval: {1e3 * median / (per_sample * args.n):.3f}  ais_ess: {statistics.mean(ess):.3f}"
            f"  speedup: {first / median:.2f}"
        )


if __name__ == "__main__":
    main()
