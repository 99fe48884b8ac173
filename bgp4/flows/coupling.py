"""Affine (RealNVP) coupling layers and the channel swap, as in the paper's appendix F.

A coupling keeps the first half x1 and maps the second half x2 -> x2 * exp(s(x1)) + t(x1), where
t and s are dense nets d1 -> hidden -> hidden -> d2 with ReLU hidden activations and s's output
passes through tanh times a learnable scalar. The two nets are evaluated as one fused net: every
layer is one batched matmul over the pair (t, s), with activations kept contiguous in a
(2, batch, features) layout so that no layout copies happen forward or backward. Same parameters
and same function as two separate `nn.Sequential`s with half the kernel launches and autograd
nodes (run/bench/bench_flow.py times both).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
from torch import nn

from bgp4.errors import InputError
from bgp4.flows.base import Flow

__all__ = ["AffineCoupling", "Swap"]


def _split_sizes(dim: int, first: Optional[int], what: str) -> tuple[int, int]:
    """(first, second) part sizes; first defaults to dim // 2."""
    first = dim // 2 if first is None else first
    if not isinstance(dim, int) or not isinstance(first, int) or not 1 <= first < dim:
        raise InputError(f"{what} needs dim >= 2 split into two non-empty parts, got dim={dim!r}, first={first!r}")
    return first, dim - first


class AffineCoupling(Flow):
    """y1 = x1, y2 = x2 * exp(s(x1)) + t(x1) on (batch, dim) tensors, x = [x1 (n_cond), x2].

    Args:
        dim: feature dimension.
        hidden: width of the two hidden layers of t and of s.
        swap: emit [y2, y1] instead of [y1, y2], i.e. this coupling followed by a channel swap
            in one step (no extra copy; the swap's log|det| is 0).
        n_cond: size of the conditioning part x1 (default dim // 2; the paper's halves).
    Parameters (fused storage of the paper's two nets t and s, index 0 = t, 1 = s; c = n_cond,
    d = dim - c):
        w1 (2, c, hidden), b1 (2, 1, hidden); w2 (2, hidden, hidden), b2 (2, 1, hidden);
        w3 (2, hidden, d), b3 (2, 1, d). Layer k of net i computes x @ wk[i] + bk[i].
        scale (1,): the learnable factor on tanh(s).
    The last layers start at zero, so a fresh coupling is the identity (plus its swap).

    Example:
        >>> import torch
        >>> coupling = AffineCoupling(dim=4, hidden=8)
        >>> x = torch.randn(3, 4)
        >>> y, logdet = coupling(x)
        >>> bool(torch.equal(y, x)), logdet.tolist()  # a fresh coupling is the identity
        (True, [0.0, 0.0, 0.0])
    """

    def __init__(
        self,
        dim: int,
        hidden: int = 60,
        swap: bool = False,
        n_cond: Optional[int] = None,
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device | str] = None,
    ):
        super().__init__()
        c, d = _split_sizes(dim, n_cond, "AffineCoupling")
        if not isinstance(hidden, int) or hidden < 1:
            raise InputError(f"AffineCoupling needs a positive integer hidden width, got {hidden!r}")
        self.dim, self.n_cond, self.hidden, self.swap = dim, c, hidden, bool(swap)
        f: dict[str, Any] = {"dtype": dtype or torch.get_default_dtype(), "device": device}
        h = hidden
        self.w1 = nn.Parameter(torch.empty(2, c, h, **f))
        self.b1 = nn.Parameter(torch.empty(2, 1, h, **f))
        self.w2 = nn.Parameter(torch.empty(2, h, h, **f))
        self.b2 = nn.Parameter(torch.empty(2, 1, h, **f))
        self.w3 = nn.Parameter(torch.zeros(2, h, d, **f))
        self.b3 = nn.Parameter(torch.zeros(2, 1, d, **f))
        self.scale = nn.Parameter(torch.ones(1, **f))
        # torch.nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases.
        with torch.no_grad():
            for p, fan_in in ((self.w1, c), (self.b1, c), (self.w2, h), (self.b2, h)):
                bound = 1.0 / math.sqrt(fan_in)
                p.uniform_(-bound, bound)

    def shift_and_log_scale(self, x1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """t(x1), s(x1) for x1 (batch, n_cond); s already through tanh and the scalar."""
        # In-place ReLUs are safe: baddbmm's backward does not need its output.
        h = torch.baddbmm(self.b1, x1.expand(2, -1, -1), self.w1).relu_()
        h = torch.baddbmm(self.b2, h, self.w2).relu_()
        out = torch.baddbmm(self.b3, h, self.w3)
        return out[0], torch.tanh(out[1]) * self.scale

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.n_cond
        x1, x2 = x[:, :c], x[:, c:]
        t, s = self.shift_and_log_scale(x1)
        y2 = torch.addcmul(t, x2, torch.exp(s))
        y = torch.cat((y2, x1) if self.swap else (x1, y2), dim=1)
        return y, s.sum(dim=1)

    def inverse(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.n_cond
        if self.swap:
            y2, x1 = y[:, : self.dim - c], y[:, self.dim - c :]
        else:
            x1, y2 = y[:, :c], y[:, c:]
        t, s = self.shift_and_log_scale(x1)
        x2 = (y2 - t) * torch.exp(-s)
        return torch.cat((x1, x2), dim=1), -s.sum(dim=1)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, n_cond={self.n_cond}, hidden={self.hidden}, swap={self.swap}"


class Swap(Flow):
    """Fixed channel swap [x1, x2] -> [x2, x1] of (batch, dim), x1 the first n_first; log|det| = 0."""

    def __init__(self, dim: int, n_first: Optional[int] = None):
        super().__init__()
        self.dim, self.n_first = dim, _split_sizes(dim, n_first, "Swap")[0]

    @staticmethod
    def _swap(x: torch.Tensor, first: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cat((x[:, first:], x[:, :first]), dim=1), x.new_zeros(x.shape[0])

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._swap(x, self.n_first)

    def inverse(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._swap(y, self.dim - self.n_first)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, n_first={self.n_first}"
