"""Rational-quadratic spline couplings with circular and bounded coordinates (Durkan et al. 2019;
Rezende et al. 2020 for the circle).

As in zuko, a coupling is three parts: a mask (which coordinates it transforms), a conditioner (a
dense net reading the others) and an elementwise transform (`RQSpline`). The spline arithmetic
is zuko's `MonotonicRQSTransform`: a monotonic RQ spline on [-B, B] with identity tails and knot
derivatives of 1 at +-B. A circular coordinate (an angle on [-pi, pi)) is scaled onto [-B, B],
splined and scaled back; equal end derivatives make that a smooth bijection of the circle, so the
density stays continuous where the angle wraps. Conditioners read each circular input as
(cos, sin). `CircularShift` moves the seam between blocks.

Directions follow bgp4's Flow contract, generator first: `forward` maps latent -> flow
coordinates (the spline's inverse), `inverse` maps flow coordinates -> latent (the spline itself,
the cheaper way, which maximum-likelihood training takes at every step).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from zuko.transforms import MonotonicRQSTransform, Transform

from bgp4.errors import InputError
from bgp4.flows.base import Flow

__all__ = ["RQSpline", "MaskedCoupling", "CircularShift", "SPLINE_BOUND", "wrap_angle"]


def wrap_angle(x: torch.Tensor) -> torch.Tensor:
    """Angles (rad) wrapped into [-pi, pi)."""
    return torch.remainder(x + math.pi, 2.0 * math.pi) - math.pi


#: The splines act on [-SPLINE_BOUND, SPLINE_BOUND] and are the identity beyond it.
SPLINE_BOUND = 5.0

#: zuko's default minimum slope of a spline; it bounds the unconstrained parameters' effect.
MIN_SLOPE = 1e-3


def _bounded(values: torch.Tensor, scale: float) -> torch.Tensor:
    """values / (1 + |values / scale|): odd, monotonic, bounded by +-scale."""
    return values / (1 + (values / scale).abs())


def _simplex(values: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension, written out: torch 2.13's CPU softmax over a last dimension
    of a few bins is about 8x slower (2.8 ms against 0.35 ms for 512 x 24 x 8), a quarter of a
    generator pass with gradients."""
    e = torch.exp(values - values.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


class _Spline(MonotonicRQSTransform):
    """zuko's monotonic RQ spline (its arithmetic: `_call`, `_inverse`, `call_and_ladj`), whose knots
    are built here with `_simplex`: the same knots as zuko's constructor (tests/test_splines.py)."""

    def __init__(
        self, widths: torch.Tensor, heights: torch.Tensor, derivatives: torch.Tensor, bound: float = SPLINE_BOUND
    ):
        Transform.__init__(self)
        log_slope = abs(math.log(MIN_SLOPE))
        widths = torch.nn.functional.pad(_simplex(_bounded(widths, log_slope / 2)), (1, 0))
        heights = torch.nn.functional.pad(_simplex(_bounded(heights, log_slope / 2)), (1, 0))
        self.horizontal = bound * (2 * torch.cumsum(widths, dim=-1) - 1)
        self.vertical = bound * (2 * torch.cumsum(heights, dim=-1) - 1)
        self.derivatives = torch.exp(torch.nn.functional.pad(_bounded(derivatives, log_slope), (1, 1)))


class RQSpline:
    """Elementwise monotonic RQ spline with `bins` bins on [-bound, bound], identity outside.

    Parameters per coordinate: `n_params` = 3 bins - 1 unconstrained numbers (bin widths, bin
    heights, interior knot derivatives), all zero for the identity. Inputs x (B, d) with params
    (B, d, n_params) and a per-coordinate input scale (d,) (bound / pi for angles, 1 otherwise).

    Example:
        >>> spline = RQSpline(bins=8, bound=5.0)
        >>> x, p = torch.randn(4, 3), torch.zeros(4, 3, spline.n_params)
        >>> y, ladj = spline.forward(x, p, torch.ones(3))
        >>> bool(torch.allclose(y, x, atol=1e-6)) and bool(ladj.abs().max() < 1e-6)
        True
    """

    def __init__(self, bins: int = 8, bound: float = SPLINE_BOUND):
        if not isinstance(bins, int) or bins < 2:
            raise InputError(f"spline bins must be an integer >= 2, got {bins!r}")
        if not bound > 0:
            raise InputError(f"spline bound must be positive, got {bound!r}")
        self.bins, self.bound = bins, float(bound)
        self.n_params = 3 * bins - 1

    def _spline(self, params: torch.Tensor) -> MonotonicRQSTransform:
        k = self.bins
        # torch.compile lowers zuko's softmax well (5-7 % faster than `_Spline` there:
        # run/bench/bench_spline_knots.py); eager passes are 1.2-1.5x faster with `_Spline`
        build = MonotonicRQSTransform if torch.compiler.is_compiling() else _Spline
        return build(params[..., :k], params[..., k : 2 * k], params[..., 2 * k :], bound=self.bound)

    def forward(self, x: torch.Tensor, params: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """y = S(x) and log|dS/dx| (B,) summed over coordinates."""
        y, ladj = self._spline(params).call_and_ladj(x * scale)
        return y / scale, ladj.sum(-1)

    def inverse(self, y: torch.Tensor, params: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x = S^-1(y) and log|dS^-1/dy| (B,) summed over coordinates."""
        spline = self._spline(params)
        x = spline.inv(y * scale)
        _, ladj = spline.call_and_ladj(x)  # zuko's inverse has no log-det of its own
        return x / scale, -ladj.sum(-1)


class MaskedCoupling(Flow):
    """Coupling on (batch, dim): coordinates where `mask` is True are splined given the others.

    Args:
        mask: (dim,) bool, the transformed coordinates.
        circular: (dim,) bool, coordinates that are angles on [-pi, pi).
        hidden: width of the conditioner's hidden layers.
        layers: number of the conditioner's hidden layers.
        bins: spline bins (`RQSpline`).
        bound: spline interval half-width (`RQSpline`).
    The conditioner's last layer starts at zero, so a fresh coupling is the identity.
    """

    def __init__(
        self,
        mask: torch.Tensor,
        circular: torch.Tensor,
        hidden: int = 256,
        layers: int = 2,
        bins: int = 8,
        bound: float = SPLINE_BOUND,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        mask, circular = torch.as_tensor(mask, dtype=torch.bool), torch.as_tensor(circular, dtype=torch.bool)
        if mask.shape != circular.shape or mask.ndim != 1 or not 0 < int(mask.sum()) < mask.numel():
            raise InputError("a coupling needs a 1-d mask with transformed and conditioning coordinates")
        if not isinstance(hidden, int) or hidden < 1 or not isinstance(layers, int) or layers < 1:
            raise InputError(f"conditioner needs positive integer width and depth, got {hidden!r}, {layers!r}")
        self.spline = RQSpline(bins, bound)
        cond = (~mask).nonzero().flatten()
        self.register_buffer("mask", mask)
        self.register_buffer("circular", circular)
        self.register_buffer("_t", mask.nonzero().flatten(), persistent=False)
        self.register_buffer("_c_circ", cond[circular[cond]], persistent=False)
        self.register_buffer("_c_flat", cond[~circular[cond]], persistent=False)
        self.register_buffer(
            "_scale",
            torch.where(circular[mask], bound / math.pi, 1.0).to(dtype or torch.get_default_dtype()),
            persistent=False,
        )
        n_in = 2 * self._c_circ.numel() + self._c_flat.numel()
        n_out = self._t.numel() * self.spline.n_params
        sizes = [n_in] + [hidden] * layers
        net: list[nn.Module] = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            net += [nn.Linear(a, b, dtype=dtype), nn.ReLU()]
        last = nn.Linear(sizes[-1], n_out, dtype=dtype)
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
        self.conditioner = nn.Sequential(*net, last)

    def _params(self, x: torch.Tensor) -> torch.Tensor:
        angles = x[:, self._c_circ]
        features = torch.cat((angles.cos(), angles.sin(), x[:, self._c_flat]), dim=1)
        return self.conditioner(features).view(x.shape[0], self._t.numel(), self.spline.n_params)

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y_t, logdet = self.spline.inverse(z[:, self._t], self._params(z), self._scale)
        return z.index_copy(1, self._t, y_t), logdet

    def inverse(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z_t, logdet = self.spline.forward(y[:, self._t], self._params(y), self._scale)
        return y.index_copy(1, self._t, z_t), logdet

    def extra_repr(self) -> str:
        return (
            f"transformed={self._t.numel()}, conditioning={self.mask.numel() - self._t.numel()}, "
            f"circular={int(self.circular.sum())}, bins={self.spline.bins}, bound={self.spline.bound}"
        )


class CircularShift(Flow):
    """Rotates the circular coordinates of (batch, dim) by fixed angles `shift` (dim,) rad; log|det| = 0."""

    def __init__(self, shift: torch.Tensor, circular: torch.Tensor):
        super().__init__()
        circular = torch.as_tensor(circular, dtype=torch.bool)
        self.register_buffer("shift", torch.where(circular, torch.as_tensor(shift, dtype=torch.float64), 0.0))
        self.register_buffer("circular", circular)

    def _rotate(self, x: torch.Tensor, sign: float) -> torch.Tensor:
        moved = wrap_angle(x + sign * self.shift.to(x.dtype))
        return torch.where(self.circular, moved, x)

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._rotate(z, 1.0), z.new_zeros(z.shape[0])

    def inverse(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._rotate(y, -1.0), y.new_zeros(y.shape[0])
