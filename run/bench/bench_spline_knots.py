"""Cost of the spline generator's eager passes with its knots built by zuko's constructor and by
bgp4's (`bgp4.flows.splines._Spline`, a written-out softmax), interleaved on the same weights.

torch 2.13's CPU softmax over a last dimension of a few bins is slow (about 2.8 ms for 512 x 24 x 8,
against 0.35 ms written out). Passes timed, batch 512 (alanine dipeptide, 48 dims, spline kind,
weights perturbed so that every spline bends):
- generate: latent -> positions with log q, no gradients (sampling);
- generate_grad: the same with gradients in the latent (each AIS move, FAB's sampler);
- likelihood: flow coordinates -> NLL, forward and backward (an eager likelihood step);
- likelihood_compiled (with --compiled): the same through torch.compile, as `bgp4 train` runs long
  CPU runs; each variant compiled once, then timed in its own block of rounds.

Prints `name: value` lines: each pass's median and minimum (ms) for zuko and bgp4, the speedups
(zuko / bgp4 medians), and the largest difference of their outputs (log q, nats). Other programs
may share the cores: rounds are interleaved and medians are printed.

Usage: python run/bench/bench_spline_knots.py [--rounds 15] [--threads 1] [--batch 512] [--compiled]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from zuko.transforms import MonotonicRQSTransform

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bgp4.flows import splines  # noqa: E402
from bgp4.generator.losses import likelihood_loss  # noqa: E402
from bgp4.generator.model import build_generator  # noqa: E402

__all__ = ["zuko_knots", "passes", "main"]


def zuko_knots(self: splines.RQSpline, params: torch.Tensor) -> MonotonicRQSTransform:
    k = self.bins
    return MonotonicRQSTransform(params[..., :k], params[..., k : 2 * k], params[..., 2 * k :], bound=self.bound)


def passes(bg, z: torch.Tensor, y: torch.Tensor, logdet: torch.Tensor) -> dict:
    def generate():
        with torch.no_grad():
            return bg.generate(z).log_q

    def generate_grad():
        zz = z.detach().requires_grad_(True)
        s = bg.generate(zz)
        torch.autograd.grad(s.log_q.sum() + s.x.sum(), zz)
        return s.log_q.detach()

    def likelihood():
        nll = likelihood_loss(bg, y, logdet)
        nll.mean().backward()
        bg.zero_grad(set_to_none=True)
        return nll.detach()

    return {"generate": generate, "generate_grad": generate_grad, "likelihood": likelihood}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--compiled", action="store_true", help="also time the torch.compile'd likelihood step")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    bg = build_generator("spline", temperature=600.0)
    with torch.no_grad():
        for p in bg.flow.parameters():
            p.add_(0.05 * torch.randn_like(p))
    z = bg.sample_latent(args.batch)
    with torch.no_grad():
        y, logdet = bg.flow_coordinates(bg.generate(z).x)
    ours = splines.RQSpline._spline
    times: dict[tuple[str, str], list[float]] = {}
    outputs: dict[tuple[str, str], torch.Tensor] = {}
    for _ in range(args.rounds + 1):  # the first round warms up and is not counted
        for knots, build in (("zuko", zuko_knots), ("bgp4", ours)):
            splines.RQSpline._spline = build
            for name, run in passes(bg, z, y, logdet).items():
                started = time.perf_counter()
                outputs[knots, name] = run()
                times.setdefault((knots, name), []).append(1e3 * (time.perf_counter() - started))
    names = ["generate", "generate_grad", "likelihood"]
    if args.compiled:
        names.append("likelihood_compiled")
        for knots, build in (("zuko", zuko_knots), ("bgp4", ours)):
            splines.RQSpline._spline = build
            torch._dynamo.reset()
            step = torch.compile(lambda: likelihood_loss(bg, y, logdet), dynamic=False)
            for _ in range(args.rounds + 1):
                started = time.perf_counter()
                nll = step()
                nll.mean().backward()
                bg.zero_grad(set_to_none=True)
                outputs[knots, names[-1]] = nll.detach()
                times.setdefault((knots, names[-1]), []).append(1e3 * (time.perf_counter() - started))
    splines.RQSpline._spline = ours
    for name in names:
        medians = {}
        for knots in ("zuko", "bgp4"):
            counted = times[knots, name][1:]
            medians[knots] = statistics.median(counted)
            print(f"{name}_ms_{knots}: {medians[knots]:.1f} (min {min(counted):.1f})")
        print(f"{name}_speedup: {medians['zuko'] / medians['bgp4']:.2f}")
        diff = (outputs["zuko", name] - outputs["bgp4", name]).abs().max()
        print(f"{name}_max_abs_diff_nats: {float(diff):.2e}")


if __name__ == "__main__":
    main()
