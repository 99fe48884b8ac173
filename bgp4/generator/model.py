"""Boltzmann generators: the paper's two (RNVP couplings with swaps, or with P4Inv layers) and two
rational-quadratic spline flows with circular torsions (fixed permutations, or P4Inv layers on the
non-circular coordinates).

Generator direction z -> x: z ~ N(0, I) in flow dims -> couplings (and P4Inv layers) -> flow
coordinates y -> mixed coordinate transform -> positions x (nm). `log_q` / `log_prob` are log
densities w.r.t. the Cartesian volume on the n_dims-dimensional manifold the transform spans
(rigid motion removed), so reverse-KL losses read u(x) / kT + log_q.
"""

from __future__ import annotations

import math
import pickle
from pathlib import Path
from typing import Any, NamedTuple, Optional

import numpy as np
import torch
from torch import nn

from bgp4._io import atomic_write
from bgp4.errors import InputError, first_line
from bgp4.flows.base import SequentialFlow, SubsetFlow
from bgp4.flows.coordinates import MixedCoordinateTransform
from bgp4.flows.coupling import AffineCoupling
from bgp4.flows.p4inv import P4InvLinear
from bgp4.flows.splines import CircularShift, MaskedCoupling, wrap_angle
from bgp4.flows.structure_fit import fit_to_structure
from bgp4.kinds import KINDS, get_kind
from bgp4.settings import ZMATRICES
from bgp4.simulation.atoms import constrained_bonds
from bgp4.simulation.molecule import DEFAULT_MOLECULE, Molecule, get_molecule, molecule_of
from bgp4.simulation.zmatrix import with_automatic_zmatrix

__all__ = [
    "BoltzmannGenerator",
    "GeneratorSample",
    "build_flow",
    "build_generator",
    "load_generator",
    "model_molecule",
    "n_parameters",
    "weights_defined",
    "with_zmatrix",
]


class GeneratorSample(NamedTuple):
    """Samples of a generator: x (B, n_atoms, 3) nm, log_q (B,) nats, ok (B,) bool in-domain, z (B, n_dims)."""

    x: torch.Tensor
    log_q: torch.Tensor
    ok: torch.Tensor
    z: torch.Tensor


def with_zmatrix(molecule: Molecule, zmatrix: str = "hand") -> Molecule:
    """`molecule` with the z-matrix and rigid block a run asks for: hand (the molecule's own, for
    alanine dipeptide the hand-written one) or auto (`bgp4.simulation.zmatrix`'s, from the bond graph)."""
    if zmatrix == "hand":
        return molecule
    if zmatrix == "auto":
        return with_automatic_zmatrix(molecule)
    raise InputError(f"zmatrix must be one of {', '.join(ZMATRICES)}, got {zmatrix!r}")


def n_parameters(module: nn.Module) -> int:
    """Number of trainable scalars in `module`."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def build_flow(
    kind: str,
    dim: int,
    blocks: int = 25,
    hidden: int = 60,
    dtype: torch.dtype = torch.float32,
    circular: Optional[torch.Tensor] = None,
    bins: int = 8,
) -> SequentialFlow:
    """The flow of generator `kind` on (batch, dim).

    "rnvp": the paper's `blocks` x [coupling, swap, coupling, swap]; the swaps are folded into the
    couplings (`AffineCoupling(swap=True)`, same map). "p4inv": every swap is a
    `P4InvLinear(dim, init="reverse")`. "spline": `blocks` x [circular shift, spline coupling on
    half the coordinates, spline coupling on the other half], halves drawn per block (a fixed
    permutation); "spline-p4inv": the same with a P4Inv layer on the non-circular coordinates after
    each coupling. `circular` (dim,) bool marks angle coordinates (spline kinds only).
    """
    spec = get_kind(kind)
    if not isinstance(blocks, int) or blocks < 1:
        raise InputError(f"blocks must be a positive integer, got {blocks!r}")
    if spec.circular:
        return _spline_flow(spec.p4inv, dim, blocks, hidden, dtype, circular, bins)
    layers: list[nn.Module] = []
    for _ in range(blocks):
        if not spec.p4inv:
            # After a swap of unequal halves (odd dim) the next coupling conditions on the other part.
            layers.append(AffineCoupling(dim, hidden, swap=True, n_cond=dim // 2, dtype=dtype))
            layers.append(AffineCoupling(dim, hidden, swap=True, n_cond=dim - dim // 2, dtype=dtype))
        else:
            for _ in range(2):
                layers.append(AffineCoupling(dim, hidden, dtype=dtype))
                layers.append(P4InvLinear(dim, init="reverse", dtype=dtype))
    return SequentialFlow(layers)


def _spline_flow(
    p4inv: bool, dim: int, blocks: int, hidden: int, dtype: torch.dtype, circular: Optional[torch.Tensor], bins: int
) -> SequentialFlow:
    circular = (
        torch.zeros(dim, dtype=torch.bool) if circular is None else torch.as_tensor(circular, dtype=torch.bool).cpu()
    )
    flat = (~circular).nonzero().flatten()
    # Fixed draws (not the global generator): a shell built for loading gets the same layout.
    g = torch.Generator().manual_seed(1234)
    layers: list[nn.Module] = []
    for _ in range(blocks):
        if circular.any():
            layers.append(
                CircularShift(torch.rand(dim, generator=g, dtype=torch.float64) * 2 * math.pi - math.pi, circular)
            )
        mask = torch.zeros(dim, dtype=torch.bool)
        mask[torch.randperm(dim, generator=g)[: dim // 2]] = True
        for m in (mask, ~mask):
            layers.append(MaskedCoupling(m, circular, hidden=hidden, bins=bins, dtype=dtype))
            if p4inv and flat.numel() > 1:
                layers.append(SubsetFlow(P4InvLinear(flat.numel(), init="reverse", dtype=dtype), flat))
    return SequentialFlow(layers)


class BoltzmannGenerator(nn.Module):
    """Normal prior + flow + mixed coordinate transform; positions in nm, shapes below.

    Attributes: transform (MixedCoordinateTransform, buffers only), flow (SequentialFlow),
    config {kind, blocks, hidden, bins, fix_constrained, n_dims, molecule, zmatrix}, circular_latent (n_dims,) bool:
    latent coordinates that are angles (uniform prior on [-pi, pi), period 2 pi); the others have
    a standard normal prior.
    """

    def __init__(self, transform: MixedCoordinateTransform, flow: SequentialFlow, config: dict):
        super().__init__()
        self.transform, self.flow, self.config = transform, flow, dict(config)
        self.n_dims = transform.n_dims
        self.register_buffer("circular_latent", transform.circular_mask.clone(), persistent=False)
        self._n_circular = int(self.circular_latent.sum())  # a Python int: no host sync under torch.compile

    @property
    def molecule_name(self) -> str:
        """Name of the molecule the generator was fitted to (files of older versions: the default)."""
        return str(self.config.get("molecule", DEFAULT_MOLECULE))

    @property
    def zmatrix(self) -> str:
        """Which z-matrix the transform was built from: hand or auto (files of older versions: hand).
        The transform itself keeps its rows (`MixedCoordinateTransform.structure`), so a model
        file reloads to the same generator either way."""
        return str(self.config.get("zmatrix", "hand"))

    def molecule(self) -> Molecule:
        """The molecule (OpenMM system, topology) the generator was fitted to.

        Its z-matrix is the one this version of bgp4 gives for the run's choice (hand or auto); the
        generator itself maps coordinates with the rows saved in its transform
        (`self.transform.structure()`), which stay as they were built."""
        return with_zmatrix(molecule_of(self.config, source="the model"), self.zmatrix)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.flow.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.flow.parameters()).device

    def prior_log_prob(self, z: torch.Tensor) -> torch.Tensor:
        """log prior density of z (B, n_dims) -> (B,): N(0, 1) per coordinate, uniform on circular ones."""
        circ, n_circ = self.circular_latent, self._n_circular
        normal = (torch.where(circ, 0.0, z.square()) if n_circ else z.square()).sum(1)
        return -0.5 * normal - 0.5 * (self.n_dims - n_circ) * math.log(2.0 * math.pi) - n_circ * math.log(2.0 * math.pi)

    def sample_latent(self, n: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """n draws z (n, n_dims) from the prior, from `generator` when given.

        The draws are made on the generator's device and then moved to the model's, so a CPU
        generator (AIS chains keep theirs on the CPU) serves a model on CUDA too.
        """
        if not isinstance(n, int) or n < 1:
            raise InputError(f"number of samples must be a positive integer, got {n!r}")
        where = generator.device if generator is not None else self.device
        z = torch.randn(n, self.n_dims, dtype=self.dtype, device=where, generator=generator)
        if self._n_circular:
            u = torch.rand(n, self.n_dims, dtype=self.dtype, device=where, generator=generator)
            z = torch.where(self.circular_latent.to(where), (2.0 * u - 1.0) * math.pi, z)
        return z.to(self.device)

    def generate(self, z: torch.Tensor) -> GeneratorSample:
        """Push latent points z (B, n_dims) through flow and transform; differentiable in z and parameters.

        log_q is the generator's log density of x (Cartesian volume, nats), so
        log_q - prior_log_prob(z) = -log|det dx/dz|.
        """
        if self._n_circular:  # the prior is periodic there: any real z is an angle
            z = torch.where(self.circular_latent, wrap_angle(z), z)
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
        payload = {
            "config": self.config,
            "transform": self.transform.structure(),
            "dtype": str(self.dtype).removeprefix("torch."),
            "state_dict": self.state_dict(),
        }
        atomic_write(path, lambda tmp: torch.save(payload, tmp))


def _frames_array(data) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(data) if not isinstance(data, torch.Tensor) else data)
    return x.detach().to("cpu", torch.float64)


def build_generator(
    kind: str = "rnvp",
    data: np.ndarray | torch.Tensor | None = None,
    molecule: Optional[Molecule] = None,
    *,
    blocks: int = 0,
    hidden: int = 0,
    fix_constrained: bool = True,
    dtype: torch.dtype = torch.float32,
    bins: int = 0,
    shell: bool = False,
    zmatrix: str = "hand",
    temperature: Optional[float] = None,
) -> BoltzmannGenerator:
    """A generator of `kind` whose coordinate transform is fitted to `data` (or, without data, to
    the molecule's structure at `temperature`).

    Args:
        kind: a name in bgp4.kinds.KINDS (rnvp, p4inv, spline, spline-p4inv).
        data: (n, n_atoms, 3) training frames in nm; they fix the z-matrix statistics, the rigid
            block's PCA and (spline kinds) which torsions are circular.
        molecule: the molecule of the frames (None: bgp4.simulation.molecule's default).
        blocks: coupling blocks; 0 takes the kind's default (bgp4.kinds.KINDS).
        hidden: hidden width; 0 takes the kind's default.
        bins: spline bins; 0 takes the kind's default.
        fix_constrained: hold every constrained bond of the system fixed (48 flow dims for the
            default molecule; False: the paper's 60).
        shell: with data=None, build an unfitted shell whose buffers `load_state_dict` fills;
            without it, data=None is refused (an unfitted model samples nonsense).
        zmatrix: hand (the molecule's own z-matrix and rigid block) or auto (the automatic ones
            from its bond graph, `bgp4.simulation.zmatrix`); both give 48 flow dims for the default
            molecule with fix_constrained.
        temperature: K; with data=None, fit the transform without MD frames: centred on the
            molecule's structure (locally minimized) with force-field widths at this temperature
            (`bgp4.flows.structure_fit.fit_to_structure`). Ignored when data is given.

    Trainable parameters at the defaults, 48 dims: 662,450 (rnvp) / 669,650 (p4inv).

    >>> from bgp4.simulation.molecule import get_molecule
    >>> bg = build_generator("rnvp", molecule=get_molecule(), shell=True)
    >>> bg.n_dims
    48
    """
    spec = get_kind(kind)
    molecule = with_zmatrix(get_molecule() if molecule is None else molecule, zmatrix)
    torsions = spec.torsions
    fitted_to = {}
    if data is None and temperature is not None:
        transform = fit_to_structure(molecule, temperature, fix_constrained=fix_constrained, torsions=torsions)
        fitted_to = {"fitted_to": "structure", "fit_temperature": float(temperature)}
    elif data is None:
        if not shell:
            raise InputError(
                "build_generator needs training frames (data) to fit its coordinate transform, or a "
                "temperature to fit it to the molecule's structure; pass shell=True for an unfitted shell"
            )
        transform = MixedCoordinateTransform.shell(molecule, fix_constrained, torsions=torsions)
    else:
        transform = MixedCoordinateTransform.fit(_frames_array(data), molecule, fix_constrained, torsions=torsions)
    config = {
        "kind": kind,
        **spec.architecture(blocks, hidden, bins),
        "fix_constrained": bool(fix_constrained),
        "n_dims": transform.n_dims,
        **molecule.record(),  # name, system (force field, solvent, constraints), structure of a PDB molecule
        "zmatrix": zmatrix,
        **fitted_to,
    }
    return BoltzmannGenerator(transform, _flow_for(config, transform, dtype), config)


def _flow_for(config: dict, transform: MixedCoordinateTransform, dtype: torch.dtype) -> SequentialFlow:
    return build_flow(
        config["kind"],
        transform.n_dims,
        config["blocks"],
        config["hidden"],
        dtype,
        circular=transform.circular_mask,
        bins=config.get("bins", 8),
    )


def load_generator(path: str | Path, map_location: Optional[str | torch.device] = "cpu") -> BoltzmannGenerator:
    """Rebuild a generator written by `BoltzmannGenerator.save` (no molecule needed)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"no model file at {path}")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
        config, structure = payload["config"], payload["transform"]
        dtype = getattr(torch, payload["dtype"])
        if config["kind"] not in KINDS:
            raise KeyError(f"unknown generator kind {config['kind']!r}")
        transform = MixedCoordinateTransform(**structure)
        # the transform's fitted buffers (which torsions are circular) shape the flow: load them first
        prefix = "transform."
        state = dict(payload["state_dict"])
        # files written before circular torsions existed hold logit torsions only
        state.setdefault(prefix + "torsion_circular", torch.zeros(transform.n_ic, dtype=torch.bool))
        transform.load_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})
        if transform.n_dims != config["n_dims"]:
            raise KeyError(f"transform has {transform.n_dims} dims, config says {config['n_dims']}")
        model = BoltzmannGenerator(transform, _flow_for(config, transform, dtype), config)
        model.load_state_dict(state)
    except (
        KeyError,
        TypeError,
        RuntimeError,
        AttributeError,
        EOFError,
        ValueError,
        OSError,
        pickle.UnpicklingError,
        InputError,
    ) as err:
        raise InputError(f"{path} is not a bgp4 model file of this version ({first_line(err)})") from None
    return model.to(map_location) if map_location is not None else model


def model_molecule(path: str | Path) -> Molecule:
    """The molecule (and its system) a model file was trained on, read from its record alone."""
    try:
        config = torch.load(Path(path), map_location="cpu", weights_only=True)["config"]
    except (KeyError, TypeError, RuntimeError, EOFError, OSError, pickle.UnpicklingError) as err:
        raise InputError(f"{path} is not a bgp4 model file of this version ({first_line(err)})") from None
    return molecule_of(config, source=path)


def weights_defined(bg, molecule) -> dict[str, Any]:
    """{"weights_defined": bool, "weights_note": str}: importance weights p/q exist only when no
    constrained bond of `molecule`'s system is a flow dimension of `bg` (otherwise the target is
    improper along it)."""
    bonds = constrained_bonds(molecule)
    left = bg.transform.free_constrained_pairs(bonds)
    if not left:
        note = "every constrained bond is held fixed" if len(bonds) else "the system has no constraints"
        return {"weights_defined": True, "weights_note": note}
    pairs = ", ".join(f"{a}-{b}" for a, b in left)
    return {
        "weights_defined": False,
        "weights_note": (
            f"{len(left)} constrained bond(s) ({pairs}) are flow dimensions: the MD keeps them constant, so p/q is "
            "unbounded along them and reverse ESS and reweighted figures are not defined (train with --fix-constrained)"
        ),
    }
