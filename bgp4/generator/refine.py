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
MALA moves prevent: see README). HMC step sizes are tuned per level on a separate pilot batch
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
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np
import torch

from bgp4.analysis.weights import lineage_ess
from bgp4.errors import InputError
from bgp4.generator.targets import Evaluation, FunctionTarget, GeneratorTarget, Target
from bgp4.settings import check_refine

__all__ = [
    "AnnealResult",
    "Evaluation",
    "FunctionTarget",
    "GeneratorTarget",
    "Target",
    "anneal",
    "anneal_target",
    "kish_ess",
    "schedule",
    "tune_step_sizes",
    "Chains",
]

TARGET_ACCEPT = 0.65
PILOT = 1_000


def schedule(levels: int, power: float = 2.0) -> np.ndarray:
    """Inverse temperatures b_0 = 0 < b_1 < ... < b_K < b_{K+1} = 1, shape (K + 2,): b_k = (k / (K + 1))^power."""
    if not isinstance(levels, (int, np.integer)) or levels < 0:
        raise InputError(f"refinement levels must be a non-negative integer, got {levels!r}")
    if not power > 0:
        raise InputError(f"schedule power must be positive, got {power}")
    return (np.arange(levels + 2) / (levels + 1)) ** power


def kish_ess(log_w: torch.Tensor | np.ndarray) -> float:
    """Kish ESS per sample, (sum w)^2 / sum w^2 / N, of log weights (N,); 0 when no weight is positive."""
    lw = torch.as_tensor(log_w, dtype=torch.float64)
    if not torch.isfinite(lw).any():
        return 0.0
    return float(torch.exp(2 * torch.logsumexp(lw, 0) - torch.logsumexp(2 * lw, 0)) / lw.numel())


def _systematic(log_w: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Indices (N,) of a systematic resample with probabilities softmax(log_w)."""
    n = log_w.numel()
    cdf = torch.cumsum(torch.softmax(log_w, 0), 0)
    points = (torch.rand(1, generator=generator, dtype=torch.float64) + torch.arange(n, dtype=torch.float64)) / n
    points = points.to(log_w.device)
    return torch.searchsorted(cdf, points).clamp_(max=n - 1)


class Chains:
    """State of N annealed samples: z (N, d), cached target values, log weights, level done, statistics.

    `state_dict()` / `Chains.from_state` give a plain dict of numpy arrays (for an npz checkpoint).
    """

    ARRAYS = ("z", "log_base", "log_ratio", "grad_base", "grad_ratio", "log_w", "ancestor")

    def __init__(self, z: torch.Tensor, ev: Evaluation, levels: int):
        self.z, self.log_base, self.log_ratio = z.detach(), ev.log_base, ev.log_ratio
        self.grad_base, self.grad_ratio = ev.grad_base, ev.grad_ratio
        self.aux = dict(ev.aux)
        self.log_w = torch.zeros(len(z), dtype=torch.float64, device=z.device)
        self.ancestor = torch.arange(len(z), device=z.device)
        self.level = 0
        self.acceptance = np.full(levels, np.nan)
        self.independence_acceptance = np.full(levels, np.nan)
        self.n_evals = len(z)
        self.resampled = np.zeros(levels, dtype=bool)
        self.finished = False

    def take(self, rows: torch.Tensor, z: torch.Tensor, ev: Evaluation, sub: torch.Tensor) -> None:
        """Store z and the entries `sub` (mask) of the evaluation `ev` at the row indices `rows`."""
        self.z[rows] = z
        for name in ("log_base", "log_ratio", "grad_base", "grad_ratio"):
            if (mine := getattr(self, name)) is not None:  # no gradients are kept without HMC moves
                mine[rows] = getattr(ev, name)[sub].to(mine.dtype)
        for k, v in ev.aux.items():
            self.aux[k][rows] = v[sub].to(self.aux[k].dtype)

    def live_rows(self) -> torch.Tensor:
        """Indices of the samples that still move: finite weight and finite target."""
        return torch.nonzero(torch.isfinite(self.log_w) & torch.isfinite(self.log_ratio)).squeeze(1)

    def reorder(self, idx: torch.Tensor) -> None:
        for name in self.ARRAYS:
            if getattr(self, name) is not None:
                setattr(self, name, getattr(self, name)[idx])
        self.aux = {k: v[idx] for k, v in self.aux.items()}

    def state_dict(self) -> dict[str, np.ndarray]:
        # the gradients are None when there are no levels (K = 0: nothing moves)
        out = {name: v.cpu().numpy() for name in self.ARRAYS if (v := getattr(self, name)) is not None}
        out.update({f"aux_{k}": v.cpu().numpy() for k, v in self.aux.items()})
        out.update(
            level=np.array(self.level),
            acceptance=self.acceptance,
            n_evals=np.array(self.n_evals),
            independence_acceptance=self.independence_acceptance,
            resampled=self.resampled,
            finished=np.array(self.finished),
        )
        return out

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray], device: torch.device | str = "cpu") -> Chains:
        self = cls.__new__(cls)
        for name in cls.ARRAYS:
            setattr(self, name, torch.as_tensor(np.array(state[name])).to(device) if name in state else None)
        self.aux = {k[4:]: torch.as_tensor(np.array(v)).to(device) for k, v in state.items() if k.startswith("aux_")}
        self.level, self.n_evals = int(state["level"]), int(state["n_evals"])
        self.acceptance, self.resampled = np.array(state["acceptance"]), np.array(state["resampled"])
        self.independence_acceptance = np.array(
            state.get("independence_acceptance", np.full(len(self.acceptance), np.nan))
        )
        self.finished = bool(state["finished"])
        if self.ancestor is None and not self.resampled.any():  # a state saved before lineages were kept
            self.ancestor = torch.arange(len(self.z), device=self.z.device)
        return self


def _wrap(z: torch.Tensor, circular: Optional[torch.Tensor]) -> torch.Tensor:
    if circular is None or not bool(circular.any()):
        return z
    wrapped = torch.remainder(z + math.pi, 2 * math.pi) - math.pi
    return torch.where(circular.to(z.device), wrapped, z)


def _hmc_step(target: Target, c: Chains, b: float, eps: float, leapfrog: int, gen: torch.Generator) -> float:
    """One HMC move (L leapfrog steps, L = 1: MALA) of every live sample at g_b; returns the mean acceptance."""
    if c.grad_ratio is None:
        raise ValueError(
            "these chains keep no gradients (started with steps=0): start them with steps > 0 for HMC moves"
        )
    idx = c.live_rows()
    if len(idx) == 0:
        return math.nan
    z0 = c.z[idx]
    p0 = torch.randn(z0.shape, generator=gen, dtype=z0.dtype).to(z0.device)
    log_g0 = c.log_base[idx] + b * c.log_ratio[idx]
    grad = c.grad_base[idx] + b * c.grad_ratio[idx]
    z, p = z0, p0 + 0.5 * eps * grad
    passable = torch.ones(len(idx), dtype=torch.bool, device=z0.device)
    for step in range(leapfrog):
        z = _wrap(z + eps * p, target.circular)
        ev = target.evaluate(z)
        c.n_evals += len(idx)
        passable &= torch.isfinite(ev.log_ratio)
        p = p + (0.5 if step == leapfrog - 1 else 1.0) * eps * (ev.grad_base + b * ev.grad_ratio)
    log_g1 = ev.log_base + b * ev.log_ratio
    log_acc = log_g1 - log_g0 - 0.5 * (p.double().square().sum(1) - p0.double().square().sum(1))
    log_acc = torch.where(passable & torch.isfinite(log_acc), log_acc, torch.full_like(log_acc, -math.inf))
    u = torch.rand(len(idx), generator=gen, dtype=torch.float64).to(z0.device)
    accept = torch.log(u) < log_acc
    c.take(idx[accept], z[accept], ev, accept)
    return float(torch.exp(log_acc.clamp(max=0.0)).mean())


def _independence_step(target: Target, c: Chains, b: float, gen: torch.Generator) -> float:
    """One independence Metropolis move of every live sample at g_b, proposing fresh base draws;
    returns the mean acceptance. Accepts with min(1, exp(b (r' - r))), since g_b / base = exp(b r).
    Gradients are evaluated only when the chains keep them (for HMC moves)."""
    idx = c.live_rows()
    if len(idx) == 0:
        return math.nan
    z = target.sample_base(len(idx), generator=gen).to(c.z.device, c.z.dtype)
    ev = target.evaluate(z, grad=c.grad_ratio is not None)
    c.n_evals += len(idx)
    log_acc = b * (ev.log_ratio - c.log_ratio[idx])
    log_acc = torch.where(torch.isfinite(log_acc), log_acc, torch.full_like(log_acc, -math.inf))
    u = torch.rand(len(idx), generator=gen, dtype=torch.float64).to(c.z.device)
    accept = torch.log(u) < log_acc
    c.take(idx[accept], z[accept], ev, accept)
    return float(torch.exp(log_acc.clamp(max=0.0)).mean())


def _mean_rate(rates: list[float]) -> float:
    """Mean acceptance of one level's moves (nan entries: moves without live samples), nan if none."""
    return float(np.nanmean(rates)) if np.isfinite(rates).any() else math.nan


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
        if resample_ess > 0 and kish_ess(c.log_w) < resample_ess and torch.isfinite(c.log_w).any():
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
        return kish_ess(self.log_w)

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
class _Plan:
    betas: np.ndarray
    step_sizes: np.ndarray
    pilot_evals: int


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
) -> tuple[Chains, _Plan, torch.Tensor]:
    """AIS on any `Target`: tune step sizes on a pilot batch, then anneal n base samples (or z0).

    Returns the final chains, the plan (betas, step sizes, pilot evaluations) and the raw log
    weights (n,) of the starting samples.
    """
    check_refine(levels, steps, leapfrog, resample_ess, independence)
    betas = schedule(levels, power)
    sizes, pilot_evals = tune_step_sizes(
        target, betas, steps, leapfrog, n=pilot, seed=seed + 1, independence=independence
    )
    gen = torch.Generator().manual_seed(int(seed))
    z = target.sample_base(n, generator=gen) if z0 is None else z0
    c = start(target, z, levels, steps)
    raw = c.log_ratio.clone()
    run_levels(target, c, betas, sizes, steps, leapfrog, gen, resample_ess, independence=independence)
    return c, _Plan(betas, sizes, pilot_evals), raw


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
        x = generator.generate(c.z).x
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
