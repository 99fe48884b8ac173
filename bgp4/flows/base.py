"""The Flow contract: an invertible map that reports the log|det| of its Jacobian.

Every layer maps `forward(x) -> (y, logdet)` and `inverse(y) -> (x, logdet)`, where
`logdet` has shape (batch,) and is always the log|det J| of the map just applied, so
`inverse(forward(x)[0])[1] == -forward(x)[1]`. Tensors are (batch, dim) unless a layer says
otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

__all__ = ["Flow", "SequentialFlow", "SubsetFlow"]


class Flow(nn.Module):
    """Base class of every invertible layer in bgp4."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # pragma: no cover
        raise NotImplementedError

    def inverse(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # pragma: no cover
        raise NotImplementedError


class SequentialFlow(Flow):
    """A list of flows applied in order (forward) or in reverse order (inverse).

    Example:
        >>> import torch
        >>> from bgp4.flows import AffineCoupling, P4InvLinear, SequentialFlow
        >>> flow = SequentialFlow([AffineCoupling(4, hidden=8, swap=True), P4InvLinear(4)])
        >>> x = torch.randn(5, 4)
        >>> y, logdet = flow(x)
        >>> x_back, logdet_back = flow.inverse(y)
        >>> logdet.shape, bool(torch.allclose(x_back, x, atol=1e-5)), bool(torch.allclose(logdet_back, -logdet))
        (torch.Size([5]), True, True)"""

    def __init__(self, layers: Iterable[Flow]):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logdet = x.new_zeros(x.shape[0])
        for layer in self.layers:
            x, ld = layer(x)
            logdet = logdet + ld
        return x, logdet

    def inverse(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logdet = y.new_zeros(y.shape[0])
        for layer in reversed(self.layers):
            y, ld = layer.inverse(y)
            logdet = logdet + ld
        return y, logdet


class SubsetFlow(Flow):
    """Applies `flow` to the columns `index` of (batch, dim) inputs and leaves the others alone.

    Used to let a linear layer (P4Inv) mix only the non-circular coordinates: a linear map of
    angles is not a bijection of the torus.
    """

    def __init__(self, flow: Flow, index: torch.Tensor | list[int]):
        super().__init__()
        self.flow = flow
        self.register_buffer("index", torch.as_tensor(index, dtype=torch.long), persistent=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, logdet = self.flow(x[:, self.index])
        return x.index_copy(1, self.index, y), logdet

    def inverse(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, logdet = self.flow.inverse(y[:, self.index])
        return y.index_copy(1, self.index, x), logdet
