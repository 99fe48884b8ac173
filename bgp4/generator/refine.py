"""Annealed importance sampling (AIS, optionally SMC) from a generator towards the Boltzmann density.

The chains run in the generator's latent space. With z from the base density N(z) (the prior)
and x = f(z), the target is log pi(z) = -u(f(z)) + log|det df/dz| (u in kT), so the raw log
importance weight is r(z) = log pi(z) - log N(z) = -u(x) - log q(x). Intermediate targets
log g_b = log N + b r for the schedule 0 = b_0 < b_1 < ... < b_K < b_{K+1} = 1:

    for k = 1..K:  log w += (b_k - b_{k-1}) r(z);  then moves that leave g_{b_k} invariant:
                   `independence` independence Metropolis moves, then `steps` HMC moves
    finally:       log w += (1 - b_K) r(z)

K = 0 gives the raw weights r(z_0). Independence Metropolis proposes a fresh base draw z' and
accepts it with min(1, exp(b (r(z') - r(z)))): a global jump, so that samples can leave what the
generator over-covers for what it under-covers (the tail of the raw weights), which local moves
cannot. HMC has `leapfrog` steps (1 = MALA). Every move costs one evaluation per leapfrog step
(or proposal) and sample: energy and forces with a backward pass through the flow for HMC, the
energy alone for independence moves when there are no HMC moves (`steps` 0: half to a quarter of
the cost, and as good for a generator that covers every state; where it under-covers one, a
sample that jumps to a rare state of very high r stays there and its weight can dominate, which
MALA moves prevent: see run/results/ais-refinement). HMC step sizes are tuned per level on a separate pilot batch
whose samples are discarded, so the main run's kernels are fixed and its weights exact. Optional
SMC: when the Kish ESS of the running weights drops below `resample_ess`, systematic resampling,
after which every weight is the mean weight (the normalizer estimate stays unbiased); each
sample's `ancestor` (the starting sample its lineage began with) is carried along, so that the ESS
can count the copies of one lineage once (`bgp4.analysis.weights.lineage_ess`). Samples with
r = -inf (infinite energy, outside the coordinate domain) weigh zero and never move. Latent dims
flagged circular (angles of period 2 pi) are wrapped into [-pi, pi) after each position update.

Schedule: b_k = (k / (K + 1))^power; power 2 (default) puts more levels at small b, where the
samples are still the generator's and r varies most.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

import numpy as np
import torch

from bgp4.analysis.weights import lineage_ess, reverse_ess
from bgp4.generator.chains import Chains, ChainStore
from bgp4.generator.moves import hmc_step as _hmc_step  # looked up here by run_levels (tests replace it)
from bgp4.generator.moves import independence_step as _independence_step
from bgp4.generator.moves import mean_rate as _mean_rate
from bgp4.generator.moves import systematic_resample as _systematic
from bgp4.generator.rows import by_rows
from bgp4.generator.targets import Evaluation, FunctionTarget, GeneratorTarget, Target
from bgp4.settings import check_refine, check_schedule

__all__ = [
    "AnnealPlan",
    "AnnealResult",
    "ChainStore",
    "Chains",
    "Evaluation",
    "FunctionTarget",
    "GeneratorTarget",
    "STALLED_INDEPENDENCE",
    "Target",
    "anneal",
    "anneal_batches",
    "anneal_target",
    "batch_seed",
    "plan_annealing",
    "refine_note",
    "run_levels",
    "schedule",
    "start",
    "tune_step_sizes",
]

#: Below this acceptance of the independence moves at the last level, `refine_note` suggests MALA moves.
STALLED_INDEPENDENCE = 0.05
TARGET_ACCEPT = 0.65
PILOT = 1_000


def schedule(levels: int, power: float = 2.0) -> np.ndarray:
    """Inverse temperatures b_0 = 0 < b_1 < ... < b_K < b_{K+1} = 1, shape (K + 2,): b_k = (k / (K + 1))^power."""
    check_schedule(levels, power)
    return (np.arange(levels + 2) / (levels + 1)) ** power


def _ess(log_w: torch.Tensor) -> float:
    """`bgp4.analysis.weights.reverse_ess` of log weights held in a tensor (on any device)."""
    return reverse_ess(log_w.detach().cpu().numpy())


def start(target: Target, z0: torch.Tensor, levels: int, steps: int = 1) -> Chains:
    """Evaluate the base samples z0 (N, d): gradients only when there are levels with `steps` HMC
    moves to make (independence moves need none: without HMC, no move computes a gradient)."""
    return Chains(z0, target.evaluate(z0, grad=levels > 0 and steps > 0), levels)


def run_levels(
    target: Target,
    c: Chains,
    betas: np.ndarray,
    step_sizes: np.ndarray,
    steps: int,
    leapfrog: int,
    gen: torch.Generator,
    resample_ess: float = 0.0,
    adapt: bool = False,
    on_level: Optional[Callable[[Chains], None]] = None,
    independence: int = 1,
) -> Chains:
    """Advance `c` from its level to the end of the schedule (see the module docstring): at each
    level, `independence` independence Metropolis moves, then `steps` HMC moves.

    With `adapt`, the step size of each level is tuned in place from the acceptance of that
    level's own moves (pilot use only: those samples' weights are then not exact AIS weights).
    `on_level(c)` runs after every completed level (checkpointing).
    """
    levels = len(betas) - 2
    for k in range(c.level + 1, levels + 1):
        c.log_w = c.log_w + (betas[k] - betas[k - 1]) * c.log_ratio
        if resample_ess > 0 and _ess(c.log_w) < resample_ess and torch.isfinite(c.log_w).any():
            mean = torch.logsumexp(c.log_w, 0) - math.log(len(c.log_w))
            c.reorder(_systematic(c.log_w, gen).to(c.z.device))
            c.log_w = torch.full_like(c.log_w, float(mean))
            c.resampled[k - 1] = True
        if adapt and k > 1:
            step_sizes[k - 1] = step_sizes[k - 2]
        jumps = [_independence_step(target, c, float(betas[k]), gen) for _ in range(independence)]
        if independence:
            c.independence_acceptance[k - 1] = _mean_rate(jumps)
        rates = []
        for _ in range(steps):
            rates.append(_hmc_step(target, c, float(betas[k]), float(step_sizes[k - 1]), leapfrog, gen))
            if adapt and np.isfinite(rates[-1]):
                step_sizes[k - 1] *= math.exp(2.0 * (rates[-1] - TARGET_ACCEPT))
        c.acceptance[k - 1] = _mean_rate(rates)
        c.level = k
        if on_level is not None:
            on_level(c)
    if not c.finished:
        c.log_w = c.log_w + (1.0 - betas[levels]) * c.log_ratio
        c.finished = True
    return c


def tune_step_sizes(
    target: Target,
    betas: np.ndarray,
    steps: int,
    leapfrog: int,
    n: int = PILOT,
    seed: int = 0,
    initial: float = 0.5,
    independence: int = 1,
) -> tuple[np.ndarray, int]:
    """Step size per level (K,) adapted to ~65 % acceptance on a pilot batch of n samples; and its evaluations.

    The pilot makes the main run's `independence` moves per level and at least three HMC moves.
    Without HMC moves (`steps` 0) there is no pilot: the sizes are unused.
    """
    levels = len(betas) - 2
    sizes = np.full(levels, float(initial))
    if levels == 0 or steps == 0:  # no HMC moves: no step size to tune
        return sizes, 0
    gen = torch.Generator().manual_seed(int(seed))
    # at least three moves per level, so that the size can settle even when steps is 1 or 2
    pilot_steps = max(steps, 3)
    c = start(target, target.sample_base(n, generator=gen), levels, pilot_steps)
    run_levels(target, c, betas, sizes, pilot_steps, leapfrog, gen, adapt=True, independence=independence)
    return sizes, c.n_evals


class AnnealResult(NamedTuple):
    """Result of `anneal`: x (n, n_atoms, 3) nm, z (n, d), log_w (n,) AIS log weights, u (n,) kT,
    log_q (n,) of the final x, ok (n,) in-domain, raw_log_w (n,) of the starting samples,
    betas (K + 2,), step_sizes (K,), acceptance (K,), n_evals (evaluations, pilot included;
    energy only where there are no HMC moves),
    ancestor (n,): the starting sample of each sample's lineage (SMC resampling copies samples),
    independence_acceptance (K,): of the independence moves (nan without them)."""

    x: torch.Tensor
    z: torch.Tensor
    log_w: torch.Tensor
    u: torch.Tensor
    log_q: torch.Tensor
    ok: torch.Tensor
    raw_log_w: torch.Tensor
    betas: np.ndarray
    step_sizes: np.ndarray
    acceptance: np.ndarray
    n_evals: int
    ancestor: Optional[torch.Tensor] = None
    independence_acceptance: Optional[np.ndarray] = None

    @property
    def ess(self) -> float:
        """Kish ESS per sample of the AIS weights (`bgp4.analysis.weights.reverse_ess`)."""
        return _ess(self.log_w)

    @property
    def lineage_ess(self) -> float:
        """Kish ESS per sample counting the copies of one lineage once (= ess without resampling)."""
        if self.ancestor is None:  # lineages unknown (a state saved before they were kept)
            return math.nan
        return lineage_ess(self.log_w.cpu().numpy(), self.ancestor.cpu().numpy())

    @property
    def log_z(self) -> float:
        """log of the mean weight: the estimate of log(Z_pi / Z_base)."""
        return float(torch.logsumexp(self.log_w, 0) - math.log(len(self.log_w)))


@dataclass
class AnnealPlan:
    """What every batch of one refinement shares: inverse temperatures betas (K + 2,), the HMC
    step size of each level (K,) and the energy evaluations their pilot cost."""

    betas: np.ndarray
    step_sizes: np.ndarray
    pilot_evals: int


def plan_annealing(
    target: Target,
    levels: int,
    steps: int = 1,
    leapfrog: int = 1,
    power: float = 2.0,
    pilot: int = PILOT,
    seed: int = 0,
    independence: int = 1,
) -> AnnealPlan:
    """The schedule (`schedule(levels, power)`) and step sizes tuned on a pilot batch of `pilot`
    base samples drawn with seed + 1 (`tune_step_sizes`; its samples are discarded)."""
    betas = schedule(levels, power)
    sizes, pilot_evals = tune_step_sizes(
        target, betas, steps, leapfrog, n=pilot, seed=seed + 1, independence=independence
    )
    return AnnealPlan(betas, sizes, pilot_evals)


def batch_seed(seed: int, batch: int) -> int:
    """The seed of batch `batch`'s move generator in `anneal_batches`."""
    return int(np.random.SeedSequence([seed, batch]).generate_state(1)[0])


def anneal_batches(
    target: Target,
    plan: AnnealPlan,
    batches: Iterable[torch.Tensor],
    seed: int,
    steps: int = 1,
    leapfrog: int = 1,
    resample_ess: float = 0.0,
    independence: int = 1,
    store: Optional[ChainStore] = None,
    on_level: Optional[Callable[[int, Chains], None]] = None,
) -> list[Chains]:
    """Anneal each batch of base samples (N_i, d) with the plan's kernels, its moves drawn from a
    generator seeded with `batch_seed(seed, i)`; returns the finished chains of every batch.

    With a `store`, each batch's chains and generator are saved after every level and at its end,
    and a batch found there resumes from its saved state: a killed refinement run again gives the
    same numbers, losing at most one level. `on_level(i, chains)` runs after each save (progress).
    """
    results = []
    for i, z0 in enumerate(batches):
        state = store.load(i) if store is not None else None
        gen = torch.Generator()
        if state is not None:
            chains = Chains.from_state(state, z0.device)
            gen.set_state(torch.from_numpy(state["rng"]))
        else:
            gen.manual_seed(batch_seed(seed, i))
            chains = start(target, z0, len(plan.betas) - 2, steps)

        def saved(c: Chains, i: int = i, gen: torch.Generator = gen) -> None:
            if store is not None:
                store.save(i, {**c.state_dict(), "rng": gen.get_state().numpy()})
            if on_level is not None:
                on_level(i, c)

        if not chains.finished:
            run_levels(
                target,
                chains,
                plan.betas,
                plan.step_sizes,
                steps,
                leapfrog,
                gen,
                resample_ess,
                on_level=saved,
                independence=independence,
            )
        saved(chains)
        results.append(chains)
    return results


def anneal_target(
    target: Target,
    n: int,
    levels: int,
    steps: int = 1,
    leapfrog: int = 1,
    resample_ess: float = 0.0,
    power: float = 2.0,
    seed: int = 0,
    pilot: int = PILOT,
    z0: Optional[torch.Tensor] = None,
    independence: int = 1,
) -> tuple[Chains, AnnealPlan, torch.Tensor]:
    """AIS on any `Target`: tune step sizes on a pilot batch, then anneal n base samples (or z0).

    Returns the final chains, the plan (betas, step sizes, pilot evaluations) and the raw log
    weights (n,) of the starting samples.
    """
    check_refine(levels, steps, leapfrog, resample_ess, independence, power)
    plan = plan_annealing(target, levels, steps, leapfrog, power, pilot, seed, independence)
    gen = torch.Generator().manual_seed(int(seed))
    z = target.sample_base(n, generator=gen) if z0 is None else z0
    c = start(target, z, levels, steps)
    raw = c.log_ratio.clone()
    run_levels(target, c, plan.betas, plan.step_sizes, steps, leapfrog, gen, resample_ess, independence=independence)
    return c, plan, raw


def anneal(
    generator,
    energy,
    n: int,
    levels: int,
    steps: int = 1,
    leapfrog: int = 1,
    resample_ess: float = 0.0,
    power: float = 2.0,
    seed: int = 0,
    pilot: int = PILOT,
    independence: int = 1,
) -> AnnealResult:
    """Refine n samples of a BoltzmannGenerator by AIS towards exp(-u) (`energy`: x nm -> u kT); see module doc.

    Per level: `independence` independence Metropolis moves (one energy evaluation per sample
    each; gradients too only when there are HMC moves), then `steps` HMC moves of `leapfrog`
    steps each (1: MALA; one energy+force evaluation and a backward pass through the flow per
    leapfrog step).
    """
    target = GeneratorTarget(generator, energy)
    c, plan, raw = anneal_target(
        target, n, levels, steps, leapfrog, resample_ess, power, seed, pilot, independence=independence
    )
    with torch.no_grad():
        x = by_rows(generator.generate, c.z).x
    return AnnealResult(
        x,
        c.z,
        c.log_w,
        c.aux["u"],
        c.aux["log_q"],
        c.aux["ok"],
        raw,
        plan.betas,
        plan.step_sizes,
        c.acceptance,
        c.n_evals + plan.pilot_evals,
        c.ancestor,
        c.independence_acceptance,
    )


def refine_note(raw_ess: float | None, refined: dict[str, Any], steps: int) -> str | None:
    """A hint when refinement went wrong in a way the user can fix with the moves (None when it did
    not): `raw_ess` the raw samples' reverse ESS, `refined` the summary of `refine_run`, `steps`
    its MALA moves per level."""
    # with SMC resampling the copies of one lineage count once; a margin keeps noise from triggering it
    ess = refined.get("lineage_ess", refined.get("reverse_ess"))
    rate = refined.get("final_independence_acceptance")
    if raw_ess is not None and ess is not None and ess < 0.8 * raw_ess:
        return (
            f"refinement lowered the reverse ESS ({raw_ess:.3g} -> {ess:.3g}): a few samples carry most of the weight; "
            + (
                "--refine-steps 1 adds MALA moves, which keep samples from sticking at rare states"
                if steps == 0
                else "more levels (--refine K) spread it over more moves"
            )
        )
    if steps == 0 and rate is not None and rate < STALLED_INDEPENDENCE:
        return (
            f"the generator's own draws were accepted in only {rate:.1%} of the independence moves at the last "
            "level, so the samples hardly moved there; --refine-steps 1 adds MALA moves"
        )
    return None
