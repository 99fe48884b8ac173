"""Latent-space targets for annealed importance sampling (`bgp4.generator.refine`).

A target gives the base density N(z) and sampler and the raw log weight r(z) = log pi(z) - log N(z),
with gradients in z by autograd. `GeneratorTarget` pulls the Boltzmann density back through a
generator (u in kT, positions in nm); `FunctionTarget` takes plain functions (toy targets, tests).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple, Optional, Protocol

import torch

from bgp4.generator.rows import by_rows

__all__ = ["Evaluation", "FunctionTarget", "GeneratorTarget", "Target"]


class Evaluation(NamedTuple):
    """Base log density and raw log weight at z (B,), float64, and their gradients (B, d) in z's dtype.

    log_ratio is -inf (and grad_ratio 0) where the target cannot be evaluated (nan or +inf); aux
    holds per-sample values a target wants carried along (e.g. u in kT, log q, in-domain flags).
    """

    log_base: torch.Tensor
    log_ratio: torch.Tensor
    grad_base: Optional[torch.Tensor]
    grad_ratio: Optional[torch.Tensor]
    aux: dict


class Target(Protocol):
    """A latent-space target: base sampler and density, raw log weight r = log pi - log base."""

    dim: int
    circular: Optional[torch.Tensor]  # (dim,) bool: angles of period 2 pi, or None

    def sample_base(self, n: int, generator: Optional[torch.Generator] = None) -> torch.Tensor: ...

    def evaluate(self, z: torch.Tensor, grad: bool = True) -> Evaluation: ...


def _with_grads(z: torch.Tensor, log_base_fn: Callable, ratio_fn: Callable, grad: bool) -> Evaluation:
    """Evaluate base and ratio at z, with gradients by autograd when `grad`, in slices of rows
    (`bgp4.generator.rows`: the flow's intermediates stay bounded for any batch size)."""
    return by_rows(lambda rows: _evaluate(rows, log_base_fn, ratio_fn, grad), z)


def _evaluate(z: torch.Tensor, log_base_fn: Callable, ratio_fn: Callable, grad: bool) -> Evaluation:
    """`_with_grads` on one slice of rows."""
    zb = z.detach().requires_grad_(grad)
    with torch.set_grad_enabled(grad):
        lb = log_base_fn(zb)
        r, aux = ratio_fn(zb)
        # nan or +inf (an energy of -inf, a log q of -inf) is a failed evaluation: weight zero, as
        # with gradients below, never a weight that takes all the others' (bgp4.analysis.weights)
        r = torch.where(torch.isnan(r) | torch.isposinf(r), torch.full_like(r, -math.inf), r)
        valid = torch.isfinite(r)
        gb = gr = None
        if grad:
            gb = torch.autograd.grad(lb.sum(), zb)[0]
            gr = torch.autograd.grad(torch.where(valid, r, torch.zeros_like(r)).sum(), zb, allow_unused=True)[0]
            gr = torch.zeros_like(zb) if gr is None else gr
            bad = ~valid | ~torch.isfinite(gr).all(1)
            gr = torch.where(bad[:, None], torch.zeros_like(gr), gr)
            r = torch.where(bad, torch.full_like(r, -math.inf), r)
    return Evaluation(lb.detach().double(), r.detach().double(), gb, gr, {k: v.detach() for k, v in aux.items()})


class FunctionTarget:
    """A target from plain functions of z (B, d): log_base, log_target (unnormalized), sample_base(n, gen)."""

    def __init__(
        self,
        dim: int,
        log_base: Callable,
        log_target: Callable,
        sample_base: Callable,
        circular: Optional[torch.Tensor] = None,
    ):
        self.dim, self.circular = dim, circular
        self._lb, self._lt, self._sample = log_base, log_target, sample_base

    def sample_base(self, n: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        return self._sample(n, generator)

    def evaluate(self, z: torch.Tensor, grad: bool = True) -> Evaluation:
        return _with_grads(z, self._lb, lambda zb: (self._lt(zb) - self._lb(zb), {}), grad)


class GeneratorTarget:
    """The Boltzmann density pulled back into a generator's latent space.

    `generator` is a BoltzmannGenerator (sample_latent, prior_log_prob, generate), `energy` maps
    positions (B, n_atoms, 3) nm to u (B,) in kT, differentiably, +inf where invalid (OpenMMEnergy).
    aux: u (kT), log_q (nats), ok (in-domain). Out-of-domain samples get r = -inf.
    """

    def __init__(self, generator, energy):
        self.bg, self.energy = generator, energy
        self.dim = int(generator.n_dims)
        self.circular = getattr(generator, "circular_latent", None)

    def sample_base(self, n: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        return self.bg.sample_latent(n, generator=generator)

    def _ratio(self, z: torch.Tensor) -> tuple[torch.Tensor, dict]:
        s = self.bg.generate(z)
        # float64 positions give u in float64, as the raw samples' weights are computed
        u = self.energy.reduced_energy(s.x.double())
        r = -u - s.log_q.double()
        r = torch.where(s.ok, r, torch.full_like(r, -math.inf))
        return r, {"u": u, "log_q": s.log_q.double(), "ok": s.ok}

    def evaluate(self, z: torch.Tensor, grad: bool = True) -> Evaluation:
        return _with_grads(z, self.bg.prior_log_prob, self._ratio, grad)
