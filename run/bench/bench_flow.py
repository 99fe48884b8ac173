"""Cost of one maximum-likelihood training step of bgp4's generators on CPU (batch 256; spline kinds 512).

A step = Cartesian -> flow coordinates (mixed transform) + flow inverse + log-likelihood +
backward + Adam step. Times bgp4's RNVP and P4Inv generators and, on the same frames and the
same transform, a plain RNVP written the obvious way (one nn.Module per layer, t and s as separate
nn.Sequential, explicit swaps). Checks first that plain and fast RNVP compute the same function
(weights copied across). Steps are interleaved and repeated; medians and minima are printed,
since other programs share the cores.

Prints `name: value` lines (medians and minima, ms): train_step_ms_rnvp and train_step_ms_p4inv are
the step as `bgp4 train` runs it (flow coordinates of the training frames computed once, since
the transform has no parameters; fused Adam); train_step_ms_*_from_cartesian the same models
with the transform in every step and default Adam, like the plain one; flow_speedup_vs_plain
(plain / bgp4 train step) and flow_speedup_vs_plain_same_inputs (plain / from_cartesian);
train_step_ms_*_compiled and flow_speedup_vs_plain_compiled, the step with the likelihood
compiled as `bgp4 train --compile on` (auto on long CPU runs) does it; plain_vs_fast_max_abs_diff;
train_step_ms_spline and train_step_ms_spline-p4inv (and _compiled), the spline kinds' step at their
batch (--spline-batch, 512 as in the spline presets), timed in the same rounds as RNVP.

Usage: python run/bench/bench_flow.py [--steps 30] [--threads 2] [--frames 3000] [--no-compile]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import openmm
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bgp4.flows import AffineCoupling, P4InvScheduler  # noqa: E402
from bgp4.generator.model import BoltzmannGenerator, build_generator, n_parameters  # noqa: E402
from bgp4.generator.train import grad_norm  # noqa: E402
from bgp4.simulation.molecule import get_molecule  # noqa: E402

__all__ = [
    "PlainCoupling",
    "PlainRNVP",
    "PlainSwap",
    "build_runs",
    "compiled_nll",
    "copy_weights",
    "main",
    "md_frames",
    "parse_args",
    "plain_nll",
    "plain_vs_fast_diff",
    "precomputed_nll",
    "print_times",
    "time_steps",
]

KINDS = ("rnvp", "p4inv", "spline", "spline-p4inv")
Loss = Callable[[torch.Tensor], torch.Tensor]  # per-sample loss of a Cartesian batch
Run = tuple[nn.Module, Loss, bool]  # (module, its loss, fused Adam as `bgp4 train`)


def md_frames(molecule, n_frames: int, seed: int = 11) -> np.ndarray:
    """(n_frames, 22, 3) float64 nm: 600 K Langevin MD (Reference platform), a frame every 10 steps."""
    integrator = openmm.LangevinMiddleIntegrator(600.0, 1.0, 0.002)
    integrator.setRandomNumberSeed(seed)
    context = openmm.Context(molecule.system, integrator, openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(molecule.positions)
    openmm.LocalEnergyMinimizer.minimize(context)
    context.setVelocitiesToTemperature(600.0, seed)
    integrator.step(2000)
    out = np.empty((n_frames, molecule.n_atoms, 3))
    for i in range(n_frames):
        integrator.step(10)
        out[i] = context.getState(getPositions=True).getPositions(asNumpy=True).value_in_unit(openmm.unit.nanometer)
    return out


class PlainCoupling(nn.Module):
    """The obvious RNVP coupling: separate t and s nets, y2 = x2 exp(s(x1)) + t(x1)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.c = dim // 2

        def net() -> nn.Sequential:
            return nn.Sequential(
                nn.Linear(self.c, hidden),
                nn.ReLU(),
                nn.Linear(hidden, hidden),
                nn.ReLU(),
                nn.Linear(hidden, dim - self.c),
            )

        self.t, self.s, self.scale = net(), net(), nn.Parameter(torch.ones(1))

    def inverse(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x1, y2 = y[:, : self.c], y[:, self.c :]
        s = torch.tanh(self.s(x1)) * self.scale
        return torch.cat([x1, (y2 - self.t(x1)) * torch.exp(-s)], dim=1), -s.sum(dim=1)


class PlainSwap(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.c = dim // 2

    def inverse(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cat([y[:, self.c :], y[:, : self.c]], dim=1), torch.zeros(y.shape[0])


class PlainRNVP(nn.Module):
    """blocks x [coupling, swap, coupling, swap] as a plain ModuleList."""

    def __init__(self, dim: int, blocks: int, hidden: int):
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(blocks):
            layers += [PlainCoupling(dim, hidden), PlainSwap(dim), PlainCoupling(dim, hidden), PlainSwap(dim)]
        self.layers = nn.ModuleList(layers)

    def inverse(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logdet = torch.zeros(y.shape[0])
        for layer in reversed(self.layers):
            y, ld = layer.inverse(y)
            logdet = logdet + ld
        return y, logdet


def copy_weights(fast_layers, plain: PlainRNVP) -> None:
    """Load the fused couplings' weights into the plain nets (same function afterwards)."""
    plain_couplings = [m for m in plain.layers if isinstance(m, PlainCoupling)]
    fast = [m for m in fast_layers if isinstance(m, AffineCoupling)]
    with torch.no_grad():
        for f, p in zip(fast, plain_couplings, strict=True):
            for k, net in enumerate((p.t, p.s)):
                net[0].weight.copy_(f.w1[k].T)
                net[0].bias.copy_(f.b1[k, 0])
                net[2].weight.copy_(f.w2[k].T)
                net[2].bias.copy_(f.b2[k, 0])
                net[4].weight.copy_(f.w3[k].T)
                net[4].bias.copy_(f.b3[k, 0])
            p.scale.copy_(f.scale)


def parse_args() -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--frames", type=int, default=3000)
    parser.add_argument("--spline-batch", type=int, default=512, help="batch of the spline kinds' step")
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time the torch.compile'd step (`bgp4 train --compile`); about 2 min the first time",
    )
    return parser.parse_args()


def plain_vs_fast_diff(fast: BoltzmannGenerator, plain: PlainRNVP, batch: torch.Tensor) -> float:
    """Largest |difference| of z and log det between the fast RNVP and the plain one holding its weights."""
    # Random (non-identity) weights in the fast model, so that the comparison is not trivial.
    with torch.no_grad():
        for p in fast.flow.parameters():
            p.add_(0.05 * torch.randn_like(p))
    copy_weights(fast.flow.layers, plain)
    y, _ = fast.transform.from_cartesian(batch)
    with torch.no_grad():
        (z_fast, ld_fast), (z_plain, ld_plain) = fast.flow.inverse(y), plain.inverse(y)
    return max((z_fast - z_plain).abs().max().item(), (ld_fast - ld_plain).abs().max().item())


def plain_nll(transform: nn.Module, plain: PlainRNVP) -> Loss:
    """The plain RNVP's loss of a Cartesian batch: the transform in every step."""

    def nll(x: torch.Tensor) -> torch.Tensor:
        y, logdet_cart = transform.from_cartesian(x)
        z, logdet_flow = plain.inverse(y)
        return -(-0.5 * z.square().sum(1) + logdet_flow + logdet_cart)

    return nll


def precomputed_nll(model: BoltzmannGenerator, coords: tuple[torch.Tensor, torch.Tensor], n: int = 256) -> Loss:
    """The step as `bgp4 train` runs it: flow coordinates of all frames computed once (its batch is ignored)."""
    y_k, ld_k = coords

    def nll(_batch: torch.Tensor) -> torch.Tensor:
        z, logdet_flow = model.flow.inverse(y_k[:n])
        return -(model.prior_log_prob(z) + logdet_flow + ld_k[:n])

    return nll


def compiled_nll(
    model: BoltzmannGenerator, coords: tuple[torch.Tensor, torch.Tensor], batch: torch.Tensor, n: int
) -> Loss:
    """`bgp4 train --compile on`: the same step with the likelihood compiled (timed once here)."""
    nll = torch.compile(precomputed_nll(model, coords, n), dynamic=False)
    start = time.perf_counter()
    nll(batch).mean().backward()
    model.zero_grad(set_to_none=True)
    print(f"compile_s_{model.config['kind']}: {time.perf_counter() - start:.1f}")
    return nll


def build_runs(
    models: dict[str, BoltzmannGenerator],
    plain: PlainRNVP,
    frames: np.ndarray,
    batch: torch.Tensor,
    args: argparse.Namespace,
) -> dict[str, Run]:
    """name: (module, loss of a Cartesian batch, fused Adam), in the order the steps are timed and printed."""
    coords = {
        kind: model.flow_coordinates(torch.as_tensor(frames, dtype=torch.float32)) for kind, model in models.items()
    }

    def batch_of(kind: str) -> int:
        return args.spline_batch if kind.startswith("spline") else 256

    runs: dict[str, Run] = {
        kind: (model, precomputed_nll(model, coords[kind], batch_of(kind)), True) for kind, model in models.items()
    }
    if args.compile:
        for kind, model in models.items():
            runs[f"{kind}_compiled"] = (model, compiled_nll(model, coords[kind], batch, batch_of(kind)), True)
    runs["rnvp_from_cartesian"] = (models["rnvp"], models["rnvp"].nll, False)
    runs["p4inv_from_cartesian"] = (models["p4inv"], models["p4inv"].nll, False)
    runs["plain_rnvp"] = (plain, plain_nll(models["rnvp"].transform, plain), False)
    return runs


def time_steps(runs: dict[str, Run], batch: torch.Tensor, steps: int, warmup: int = 3) -> dict[str, list[float]]:
    """ms of each run's training step, `steps` times after `warmup` untimed ones, the runs interleaved."""
    opts = {k: torch.optim.Adam(m.parameters(), lr=1e-4, fused=fused or None) for k, (m, _, fused) in runs.items()}
    # bgp4 train's extra per-step work: the finiteness check of the gradient and the P4Inv schedule
    schedulers = {k: P4InvScheduler(m, opts[k]) for k, (m, _, fused) in runs.items() if fused and "p4inv" in k}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for step in range(steps + warmup):
        for name, (module, nll, fused) in runs.items():
            start = time.perf_counter()
            loss = nll(batch).mean()
            opts[name].zero_grad()
            loss.backward()
            if fused and not bool(torch.isfinite(grad_norm(module.parameters()))):
                raise RuntimeError(f"{name}: non-finite gradient")
            opts[name].step()
            if name in schedulers:
                schedulers[name].step()
            if step >= warmup:
                times[name].append(1e3 * (time.perf_counter() - start))
    return times


def print_times(times: dict[str, list[float]], compiled: bool) -> None:
    """The step times' `name: value` lines (median and minimum, ms) and the speedups over the plain RNVP."""
    for name, t in times.items():
        print(f"train_step_ms_{name}: {statistics.median(t):.1f}")
        print(f"train_step_ms_min_{name}: {min(t):.1f}")
    plain_ms = statistics.median(times["plain_rnvp"])
    print(f"flow_speedup_vs_plain: {plain_ms / statistics.median(times['rnvp']):.2f}")
    print(f"flow_speedup_vs_plain_same_inputs: {plain_ms / statistics.median(times['rnvp_from_cartesian']):.2f}")
    if compiled:
        print(f"flow_speedup_vs_plain_compiled: {plain_ms / statistics.median(times['rnvp_compiled']):.2f}")


def main() -> None:
    """Build the generators on fresh MD frames, check plain = fast RNVP, then time and print the steps."""
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    molecule = get_molecule()
    frames = md_frames(molecule, args.frames)
    batch = torch.as_tensor(frames[:256], dtype=torch.float32)
    models = {kind: build_generator(kind, frames, molecule=molecule) for kind in KINDS}
    for kind, model in models.items():
        print(f"parameters_{kind}: {n_parameters(model)}")
    plain = PlainRNVP(models["rnvp"].transform.n_dims, 25, 60)
    print(f"parameters_plain_rnvp: {n_parameters(plain)}")
    print(f"plain_vs_fast_max_abs_diff: {plain_vs_fast_diff(models['rnvp'], plain, batch):.3g}")
    runs = build_runs(models, plain, frames, batch, args)
    print_times(time_steps(runs, batch, args.steps), args.compile)


if __name__ == "__main__":
    main()
