"""FAB's sampler: annealed importance sampling from the flow q towards p^2/q (alpha = 2).

In the generator's latent space, with x = f(z) and r(z) = log p(x) - log q(x) the raw log weight
(`bgp4.generator.targets`), the density of p^alpha q^(1 - alpha) pulled back to z is
N(z) exp(alpha r(z)): AIS towards p^2/q is `bgp4.generator.refine`'s AIS on the ratio 2 r, with
its moves (independence Metropolis and HMC, MALA by default) and schedule. Its final log weights estimate
log (p^2/q)(x) - log q(x) up to a constant; minimizing the alpha = 2 divergence D_2(p || q) needs
samples from p^2/q, which over-weights exactly where q is too small (mass covering).

The HMC step size of each level adapts between AIS runs (towards 65 % acceptance) from the
acceptance of the last run; within a run the kernels are fixed, so its weights are exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

from bgp4.analysis.weights import reverse_ess
from bgp4.generator.losses import likelihood_loss
from bgp4.generator.refine import TARGET_ACCEPT, run_levels, schedule, start
from bgp4.generator.targets import Evaluation, GeneratorTarget, Target

__all__ = ["ALPHA", "INITIAL_STEP", "AISBatch", "AlphaTarget", "FabSampler"]

#: FAB's divergence: D_alpha with alpha = 2, i.e. AIS towards p^2 / q.
ALPHA = 2.0
#: Initial MALA step size in the latent space (standard-normal units); it adapts from the first run on.
INITIAL_STEP = 0.3


class AlphaTarget:
    """The latent-space target N(z) exp(alpha r(z)) of p^alpha q^(1 - alpha), from a `Target`
    whose raw log weight is r (alpha = 1 gives it back; alpha = 2 is FAB's p^2/q)."""

    def __init__(self, base: Target, alpha: float = ALPHA):
        self.base, self.alpha = base, float(alpha)
        self.dim, self.circular = base.dim, base.circular

    def sample_base(self, n: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        return self.base.sample_base(n, generator=generator)

    def evaluate(self, z: torch.Tensor, grad: bool = True) -> Evaluation:
        ev = self.base.evaluate(z, grad)
        grad_ratio = None if ev.grad_ratio is None else self.alpha * ev.grad_ratio
        # the raw ratio stays in aux: the flow's own weight r of each sample
        aux = {**ev.aux, "r": ev.log_ratio}
        return ev._replace(log_ratio=self.alpha * ev.log_ratio, grad_ratio=grad_ratio, aux=aux)


@dataclass
class AISBatch:
    """One AIS run towards p^2/q, as the replay buffer stores it: y (n, dims) flow coordinates and
    logdet (n,) log|dy/dx| of the final samples, log_w (n,) their AIS log weights, log_q (n,) the
    flow's log density of them (nats), evaluations (target evaluations), and diagnostics:
    flow_ess (reverse ESS of the starting flow samples towards p), ais_ess (of log_w),
    acceptance (K,) of the HMC (MALA) moves and independence_acceptance (K,) of the independence moves."""

    y: torch.Tensor
    logdet: torch.Tensor
    log_w: torch.Tensor
    log_q: torch.Tensor
    evaluations: int
    flow_ess: float
    ais_ess: float
    acceptance: np.ndarray
    independence_acceptance: np.ndarray


class FabSampler:
    """AIS from a generator towards p^2/q with `levels` intermediate distributions (schedule
    b_k = (k / (K + 1))^power on the ratio 2 r), `independence` independence Metropolis and `moves`
    HMC moves of `leapfrog` steps per level (1: MALA; each step one evaluation); step sizes (K,)
    adapt between runs (`state_dict` keeps them)."""

    def __init__(self, levels: int, moves: int, independence: int, power: float = 2.0, leapfrog: int = 1):
        self.levels, self.moves, self.independence = int(levels), int(moves), int(independence)
        self.leapfrog = int(leapfrog)
        self.betas = schedule(self.levels, power)
        self.step_sizes = np.full(self.levels, INITIAL_STEP)

    def run(self, bg, energy, n: int, generator: torch.Generator) -> AISBatch:
        """n samples of `bg` annealed towards p^2/q (p = exp(-u), `energy`: x nm -> u kT)."""
        target = AlphaTarget(GeneratorTarget(bg, energy))
        c = start(target, target.sample_base(n, generator=generator), self.levels, self.moves)
        flow_ess = reverse_ess(c.aux["r"].cpu().numpy())
        run_levels(
            target, c, self.betas, self.step_sizes, self.moves, self.leapfrog, generator, independence=self.independence
        )
        self._adapt(c.acceptance)
        with torch.no_grad():
            y, logdet = bg.flow_coordinates(bg.generate(c.z).x)
            log_q = -likelihood_loss(bg, y, logdet).double()
        log_w = torch.where(c.aux["ok"], c.log_w, torch.full_like(c.log_w, -math.inf))
        ess = reverse_ess(log_w.cpu().numpy())
        return AISBatch(
            y, logdet, log_w, log_q, c.n_evals, flow_ess, ess, c.acceptance.copy(), c.independence_acceptance.copy()
        )

    def _adapt(self, acceptance: np.ndarray) -> None:
        """Step sizes towards TARGET_ACCEPT: larger where the last run accepted more."""
        ok = np.isfinite(acceptance)
        self.step_sizes[ok] *= np.exp(2.0 * (acceptance[ok] - TARGET_ACCEPT))

    def state_dict(self) -> dict[str, Any]:
        return {"step_sizes": torch.tensor(self.step_sizes)}  # a copy: `_adapt` changes the array in place

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step_sizes = state["step_sizes"].cpu().numpy().astype(np.float64).copy()
