"""The paper's two Boltzmann generators: RNVP couplings with swaps, or with P4Inv layers.

Generator direction z -> x: z ~ N(0, I) in flow dims -> couplings (and P4Inv layers) -> flow
coordinates y -> mixed coordinate transform -> positions x (nm). `log_q` / `log_prob` are log
densities w.r.t. the Cartesian volume on the n_dims-dimensional manifold the transform spans
(rigid motion removed), so reverse-KL losses read u(x) / kT + log_q.
"""
from __future__ import annotations

import math
import pickle
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np
import torch
from torch import nn

from bgp4._io import atomic_write
from bgp4.errors import Bgp4Error, InputError
from bgp4.flows.base import SequentialFlow
from bgp4.flows.coordinates import MixedCoordinateTransform
from bgp4.flows.coupling import AffineCoupling

__all__ = ["BoltzmannGenerator", "GeneratorSample", "build_flow", "build_generator", "load_generator", "n_parameters"]

KINDS = ("rnvp", "p4inv")


class GeneratorSample(NamedTuple):
    """Samples of a generator: x (B, n_atoms, 3) nm, log_q (B,) nats, ok (B,) bool in-domain, z (B, n_dims)."""

    x: torch.Tensor
    log_q: torch.Tensor
    ok: torch.Tensor
    z: torch.Tensor


def n_parameters(module: nn.Module) -> int:
    """Number of trainable scalars in `module`."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def build_flow(kind: str, dim: int, blocks: int = 25, hidden: int = 60,
               dtype: torch.dtype = torch.float32) -> SequentialFlow:
    """The paper's flow on (batch, dim): `blocks` x [coupling, swap, coupling, swap].

    kind "rnvp": the swaps are folded into the couplings (`AffineCoupling(swap=True)`, same map).
    kind "p4inv": every swap is a `P4InvLinear(dim, init="reverse")` (A starts as the reversal).
    """
    if kind not in KINDS:
        raise InputError(f"generator kind must be one of {KINDS}, got {kind!r}")
    if not isinstance(blocks, int) or blocks < 1:
        raise InputError(f"blocks must be a positive integer, got {blocks!r}")
    layers: list[nn.Module] = []
    for _ in range(blocks):
        if kind == "rnvp":
            # After a swap of unequal halves (odd dim) the next coupling conditions on the other part.
            layers.append(AffineCoupling(dim, hidden, swap=True, n_cond=dim // 2, dtype=dtype))
            layers.append(AffineCoupling(dim, hidden, swap=True, n_cond=dim - dim // 2, dtype=dtype))
        else:
            from bgp4.flows.p4inv import P4InvLinear

            for _ in range(2):
                layers.append(AffineCoupling(dim, hidden, dtype=dtype))
                layers.append(P4InvLinear(dim, init="reverse", dtype=dtype))
    return SequentialFlow(layers)


class BoltzmannGenerator(nn.Module):
    """Normal prior + flow + mixed coordinate transform; positions in nm, shapes below.

    Attributes: transform (MixedCoordinateTransform, buffers only), flow (SequentialFlow),
    config {kind, blocks, hidden, fix_constrained, n_dims}.
    """

    def __init__(self, transform: MixedCoordinateTransform, flow: SequentialFlow, config: dict):
        super().__init__()
        self.transform, self.flow, self.config = transform, flow, dict(config)
        self.n_dims = transform.n_dims

    @property
    def dtype(self) -> torch.dtype:
        return next(self.flow.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.flow.parameters()).device

    def prior_log_prob(self, z: torch.Tensor) -> torch.Tensor:
        """log N(z; 0, I) for z (B, n_dims) -> (B,)."""
        return -0.5 * z.square().sum(1) - 0.5 * self.n_dims * math.log(2.0 * math.pi)

    def sample_latent(self, n: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """n draws z (n, n_dims) from the prior N(0, I), from `generator` when given."""
        if not isinstance(n, int) or n < 1:
            raise InputError(f"number of samples must be a positive integer, got {n!r}")
        return torch.randn(n, self.n_dims, dtype=self.dtype, device=self.device, generator=generator)

    def generate(self, z: torch.Tensor) -> GeneratorSample:
        """Push latent points z (B, n_dims) through flow and transform; differentiable in z and parameters.

        log_q is the generator's log density of x (Cartesian volume, nats), so
        log_q - prior_log_prob(z) = -log|det dx/dz|.
        """
        y, logdet_flow = self.flow(z)
        x, logdet_cart = self.transform.to_cartesian(y)
        log_q = self.prior_log_prob(z) - logdet_flow - logdet_cart
        return GeneratorSample(x, log_q, self.transform.in_domain(y), z)

    def sample(self, n: int, generator: Optional[torch.Generator] = None) -> GeneratorSample:
        """Draw n configurations; differentiable w.r.t. the flow's parameters.

        Returns a GeneratorSample: x (n, n_atoms, 3) nm, log_q (n,) nats, ok (n,) bool (True
        where the sample's flow coordinates lie in the transform's domain, i.e. where log_q is
        the density of x; elsewhere x maps back to other coordinates) and the latent z (n, n_dims).
        """
        return self.generate(self.sample_latent(n, generator))

    def flow_coordinates(self, x: torch.Tensor | np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions (B, n_atoms, 3) or (B, 3 n_atoms) nm -> flow coordinates y and log|dy/dx|."""
        x = torch.as_tensor(x, device=self.device)
        y, logdet = self.transform.from_cartesian(x)
        return y.to(self.dtype), logdet.to(self.dtype)

    def log_prob(self, x: torch.Tensor | np.ndarray) -> torch.Tensor:
        """log q(x) (B,) for positions x (B, n_atoms, 3) or (B, 3 n_atoms) nm."""
        y, logdet_cart = self.flow_coordinates(x)
        z, logdet_flow = self.flow.inverse(y)
        return self.prior_log_prob(z) + logdet_flow + logdet_cart

    def nll(self, x: torch.Tensor | np.ndarray) -> torch.Tensor:
        """-log q(x), (B,): the maximum-likelihood loss per sample."""
        return -self.log_prob(x)

    def save(self, path: str | Path) -> None:
        """Write config, transform structure, dtype and state dict (torch.save)."""
        payload = {"config": self.config, "transform": self.transform.structure(),
                   "dtype": str(self.dtype).removeprefix("torch."), "state_dict": self.state_dict()}
        atomic_write(path, lambda tmp: torch.save(payload, tmp))


def _frames_array(data) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(data) if not isinstance(data, torch.Tensor) else data)
    return x.detach().to("cpu", torch.float64)


def build_generator(kind: str = "rnvp", data=None, blocks: int = 25, hidden: int = 60,
                    fix_constrained: bool = False, molecule=None,
                    dtype: torch.dtype = torch.float32) -> BoltzmannGenerator:
    """The paper's generator; `data` (n, n_atoms, 3) nm training frames fit the transform.

    data=None builds an unfitted shell (for `load_state_dict`). molecule defaults to
    alanine dipeptide. Trainable parameters: 735,050 (rnvp) / 744,050 (p4inv) at the defaults.
    """
    if molecule is None:
        from bgp4.molecule import alanine_dipeptide

        molecule = alanine_dipeptide()
    if data is None:
        transform = MixedCoordinateTransform.shell(molecule, fix_constrained)
    else:
        transform = MixedCoordinateTransform.fit(_frames_array(data), molecule, fix_constrained)
    flow = build_flow(kind, transform.n_dims, blocks, hidden, dtype)
    config = {"kind": kind, "blocks": blocks, "hidden": hidden,
              "fix_constrained": bool(fix_constrained), "n_dims": transform.n_dims}
    return BoltzmannGenerator(transform, flow, config)


def load_generator(path: str | Path, map_location: Optional[str | torch.device] = "cpu") -> BoltzmannGenerator:
    """Rebuild a generator written by `BoltzmannGenerator.save` (no molecule needed)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"no model file at {path}")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
        config, structure = payload["config"], payload["transform"]
        dtype = getattr(torch, payload["dtype"])
    except (KeyError, TypeError, RuntimeError, AttributeError, EOFError, OSError, pickle.UnpicklingError) as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:120]
        raise InputError(f"{path} is not a bgp4 model file ({reason})") from err
    transform = MixedCoordinateTransform(**structure)
    if transform.n_dims != config["n_dims"]:
        raise Bgp4Error(f"{path}: transform has {transform.n_dims} dims, config says {config['n_dims']}")
    flow = build_flow(config["kind"], transform.n_dims, config["blocks"], config["hidden"], dtype)
    model = BoltzmannGenerator(transform, flow, config)
    model.load_state_dict(payload["state_dict"])
    return model.to(map_location) if map_location is not None else model
