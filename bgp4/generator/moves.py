"""The moves of annealed importance sampling (`bgp4.generator.refine`) on latent-space `Chains`:
HMC (MALA for one leapfrog step), independence Metropolis, and systematic resampling.

Each move advances every live sample of the chains in place at the intermediate target
log g_b = log N + b r and returns its mean acceptance; its random numbers come from the
generator it is given, so a run resumed with that generator's saved state repeats them.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from bgp4.generator.chains import Chains
from bgp4.generator.targets import Target

__all__ = ["hmc_step", "independence_step", "mean_rate", "systematic_resample", "wrap"]


def systematic_resample(log_w: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Indices (N,) of a systematic resample with probabilities softmax(log_w)."""
    n = log_w.numel()
    cdf = torch.cumsum(torch.softmax(log_w, 0), 0)
    points = (torch.rand(1, generator=generator, dtype=torch.float64) + torch.arange(n, dtype=torch.float64)) / n
    points = points.to(log_w.device)
    return torch.searchsorted(cdf, points).clamp_(max=n - 1)


def wrap(z: torch.Tensor, circular: Optional[torch.Tensor]) -> torch.Tensor:
    """z with its circular dims (angles of period 2 pi) wrapped into [-pi, pi)."""
    if circular is None or not bool(circular.any()):
        return z
    wrapped = torch.remainder(z + math.pi, 2 * math.pi) - math.pi
    return torch.where(circular.to(z.device), wrapped, z)


def hmc_step(target: Target, c: Chains, b: float, eps: float, leapfrog: int, gen: torch.Generator) -> float:
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
        z = wrap(z + eps * p, target.circular)
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


def independence_step(target: Target, c: Chains, b: float, gen: torch.Generator) -> float:
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


def mean_rate(rates: list[float]) -> float:
    """Mean acceptance of one level's moves (nan entries: moves without live samples), nan if none."""
    return float(np.nanmean(rates)) if np.isfinite(rates).any() else math.nan
