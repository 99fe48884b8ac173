"""Cost and gain of AIS refinement (`bgp4.generator.refine`) on a trained run's generator.

For each K: tunes step sizes on the pilot, anneals n samples (the same prior draws for every K)
and prints `name: value` lines: wall time (pilot and main), seconds per level, energy+force
evaluations per second and per sample, mean acceptance, raw and refined reverse ESS (Kish) with
bootstrap 95 % intervals, the share of the total weight held by the 10 largest refined weights
(a heavy tail makes ESS on 10,000 samples noisy), the log normalizer estimate, and, for SMC
(--resample-ess), the ESS with each lineage's copies counted once and the number of lineages left.

Usage: python run/bench/bench_refine.py RUN [--n 10000] [--levels 5 10 20] [--steps 1]
       [--independence 1] [--leapfrog 1] [--resample-ess 0] [--workers 0] [--threads 0]

--steps and --independence default to `bgp4 sample --refine`'s: per level one independence
Metropolis move, then one MALA move. Results before that default used `--steps 2 --independence 0`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bgp4.analysis.weights import lineage_ess, reverse_ess, reverse_ess_interval  # noqa: E402
from bgp4.generator.model import load_generator  # noqa: E402
from bgp4.generator.refine import (  # noqa: E402
    Chains,
    GeneratorTarget,
    run_levels,
    schedule,
    start,
    tune_step_sizes,
)
from bgp4.settings import RefineSettings  # noqa: E402
from bgp4.simulation.energy import OpenMMEnergy  # noqa: E402

__all__ = ["Refined", "frozen_run", "main", "parse_args", "refine", "report"]


def frozen_run(run: Path, threads: int = 0):
    """(generator with frozen parameters, temperature K) of a finished run; sets torch's threads if > 0."""
    if threads:
        torch.set_num_threads(threads)
    bg = load_generator(run / "model.pt").eval()
    for p in bg.parameters():
        p.requires_grad_(False)  # the chains need gradients in z only
    return bg, float(json.loads((run / "complete.json").read_text())["temperature"])


@dataclass
class Refined:
    """One K's annealed chains, with the pilot's evaluations and the wall times of each phase."""

    chains: Chains
    raw: torch.Tensor  # the starting samples' log weights
    pilot_evals: int
    pilot_s: float
    start_s: float
    levels_s: float
    per_level: np.ndarray  # s per level


def parse_args() -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="run directory holding model.pt and complete.json")
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--levels", type=int, nargs="+", default=[5, 10, 20])
    parser.add_argument("--steps", type=int, default=RefineSettings.steps, help="MALA/HMC moves per level")
    parser.add_argument(
        "--independence",
        type=int,
        default=RefineSettings.independence,
        help="independence Metropolis moves per level, before the MALA/HMC moves",
    )
    parser.add_argument("--leapfrog", type=int, default=1)
    parser.add_argument("--resample-ess", type=float, default=0.0)
    parser.add_argument("--power", type=float, default=2.0)
    parser.add_argument("--pilot", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=0, help="energy processes (0: one per core)")
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def refine(target: GeneratorTarget, z0: torch.Tensor, levels: int, args: argparse.Namespace) -> Refined:
    """Tune the step sizes on the pilot, then anneal a copy of z0 through `levels` levels, timed."""
    betas = schedule(levels, args.power)
    t0 = time.perf_counter()
    sizes, pilot_evals = tune_step_sizes(
        target,
        betas,
        args.steps,
        args.leapfrog,
        n=args.pilot,
        seed=args.seed + 1,
        independence=args.independence,
    )
    t1 = time.perf_counter()
    gen = torch.Generator().manual_seed(args.seed)
    chains = start(target, z0.clone(), levels, args.steps)
    raw = chains.log_ratio.clone()
    t2 = time.perf_counter()
    stamps = []
    run_levels(
        target,
        chains,
        betas,
        sizes,
        args.steps,
        args.leapfrog,
        gen,
        args.resample_ess,
        on_level=lambda c, stamps=stamps: stamps.append(time.perf_counter()),
        independence=args.independence,
    )
    t3 = time.perf_counter()
    per_level = np.diff([t2, *stamps]) if stamps else np.zeros(1)
    return Refined(chains, raw, pilot_evals, t1 - t0, t2 - t1, t3 - t2, per_level)


def report(levels: int, r: Refined, args: argparse.Namespace) -> str:
    """The `K=levels:` line of one K's costs, acceptance, ESS and normalizer."""
    chains = r.chains
    evals = chains.n_evals + r.pilot_evals
    log_z = float(torch.logsumexp(chains.log_w, 0) - np.log(args.n))
    return (
        f"K={levels}: pilot_s: {r.pilot_s:.1f}  start_s: {r.start_s:.1f}  levels_s: {r.levels_s:.1f}"
        f"  s_per_level: {r.per_level.mean():.2f}  evals: {evals}  evals_per_sample: {evals / args.n:.1f}"
        f"  evals_per_s: {(chains.n_evals - args.n) / max(r.levels_s, 1e-9):.0f}"
        f"  acceptance: {np.nanmean(chains.acceptance) if levels and args.steps else float('nan'):.2f}"
        f"  independence_acceptance: {_first_last(chains.independence_acceptance)}"
        f"  ess_raw: {reverse_ess(r.raw.cpu()):.4f} {_interval(r.raw)}"
        f"  ess_refined: {reverse_ess(chains.log_w.cpu()):.4f}"
        f" {_interval(chains.log_w)}  top10_weight: {_top_share(chains.log_w):.3f}"
        f"  log_z: {log_z:.3f}  resampled_levels: {int(chains.resampled.sum())}"
        f"  lineage_ess: {lineage_ess(chains.log_w.cpu().numpy(), chains.ancestor.cpu().numpy()):.4f}"
        f"  lineages: {chains.ancestor.unique().numel()}"
    )


def main() -> None:
    """Refine the same prior draws with every K of --levels and print a line of results per K."""
    args = parse_args()
    bg, temperature = frozen_run(args.run, args.threads)
    molecule = bg.molecule()
    print(
        f"run: {args.run}  model: {bg.config['kind']}  latent dims: {bg.n_dims}  n: {args.n}  steps: {args.steps}"
        f"  independence: {args.independence}  leapfrog: {args.leapfrog}"
        f"  resample_ess: {args.resample_ess}  power: {args.power}"
        f"  torch threads: {torch.get_num_threads()}"
    )
    with OpenMMEnergy(molecule.system, temperature, n_workers=args.workers or None) as energy:
        target = GeneratorTarget(bg, energy)
        z0 = target.sample_base(args.n, generator=torch.Generator().manual_seed(args.seed))
        for levels in args.levels:
            print(report(levels, refine(target, z0, levels, args), args), flush=True)


def _first_last(rates: np.ndarray) -> str:
    """Acceptance of the independence moves at the first and last level ("-" without them)."""
    return f"{rates[0]:.2f}..{rates[-1]:.2f}" if len(rates) and np.isfinite(rates).any() else "-"


def _interval(log_w: torch.Tensor) -> str:
    low, high = reverse_ess_interval(log_w.cpu().numpy())
    return f"[{low:.3f}, {high:.3f}]"


def _top_share(log_w: torch.Tensor, k: int = 10) -> float:
    """Share of the total weight held by the k largest weights."""
    w = torch.softmax(torch.nan_to_num(log_w.double(), nan=-torch.inf), 0)
    return float(w.topk(min(k, w.numel())).values.sum())


if __name__ == "__main__":
    main()
