"""Where one AIS evaluation spends its time: flow forward, flow backward, OpenMM energy and forces.

An AIS move evaluates log pi(z) = -u(f(z)) + log|det df/dz| and its gradient for a batch of
latent samples (`bgp4.generator.refine.GeneratorTarget.evaluate`). This splits that cost on a trained run's
generator, per batch of n samples (median of `--repeats` timings each):
flow forward with the autograd graph (z -> x, log q), the backward pass to z (through log q and
through x, with stand-in forces), and u with forces
from the OpenMM bridge; then the whole `evaluate` call, evaluations per second, and the minutes
that 100,000 samples at K = 20 (47.1 evaluations per sample, pilot included) would take.

With `--compile`, the flow's forward and backward pass again through torch.compile at one fixed
batch size: the compile time, the compiled pass's median, its speed-up over the eager pass, and
the largest gradient difference (float32 rounding). A best case for AIS: its moves evaluate only
the live samples, whose number varies, so static shapes would recompile; and the parameters are
frozen here, while FAB trains them.

Usage: python run/bench/bench_refine_cost.py RUN [--n 2000] [--repeats 3] [--threads 0] [--workers 0] [--compile]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_refine import frozen_run  # noqa: E402

from bgp4.generator.refine import GeneratorTarget  # noqa: E402
from bgp4.simulation.energy import OpenMMEnergy  # noqa: E402

__all__ = ["compile_report", "main"]

# K = 20 with `bgp4 sample --refine 20`'s moves (one independence + one MALA move per level) on
# 100,000 samples: 1 + 20 x 2 = 41 per sample, plus the 1,000-sample pilot's 1 + 20 x 4 (0.81)
EVALS_PER_SAMPLE_K20 = 41.8


def _median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _median_split(first, second, repeats: int) -> tuple[float, float]:
    """Median seconds of `first` and of `second` when each repeat runs first, then second."""
    a, b = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        first()
        t1 = time.perf_counter()
        second()
        a.append(t1 - t0)
        b.append(time.perf_counter() - t1)
    return statistics.median(a), statistics.median(b)


def _flow_pass(generate, z: torch.Tensor, forces: torch.Tensor) -> torch.Tensor:
    """Gradient in z of log q + x . forces, one flow forward and backward pass (a MALA move's flow cost)."""
    zb = z.detach().requires_grad_(True)
    x, log_q = generate(zb)
    return torch.autograd.grad(log_q.sum() + (x * forces).sum(), zb)[0]


def compile_report(bg, z: torch.Tensor, forces: torch.Tensor, repeats: int) -> str:
    """The flow pass eager and torch.compile'd, timed in alternation: a `name: value` line."""

    def eager(zb):
        s = bg.generate(zb)
        return s.x, s.log_q

    compiled = torch.compile(eager, dynamic=False)
    t0 = time.perf_counter()
    g_compiled = _flow_pass(compiled, z, forces)
    compile_s = time.perf_counter() - t0
    diff = (g_compiled - _flow_pass(eager, z, forces)).abs().max().item()
    eager_s, compiled_s = _median_split(
        lambda: _flow_pass(eager, z, forces), lambda: _flow_pass(compiled, z, forces), repeats
    )
    return (
        f"compile_s: {compile_s:.1f}  flow_pass_eager_s: {eager_s:.3f}  flow_pass_compiled_s: {compiled_s:.3f}"
        f"  compiled_speedup: {eager_s / compiled_s:.2f}  grad_max_abs_diff: {diff:.2e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="run directory holding model.pt and complete.json")
    parser.add_argument("--n", type=int, default=2000, help="samples per batch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    parser.add_argument("--workers", type=int, default=0, help="energy processes (0: one per core)")
    parser.add_argument("--compile", action="store_true", help="also time the flow pass under torch.compile")
    args = parser.parse_args()
    bg, temperature = frozen_run(args.run, args.threads)
    with OpenMMEnergy(bg.molecule().system, temperature, n_workers=args.workers or None) as energy:
        target = GeneratorTarget(bg, energy)
        z = target.sample_base(args.n, generator=torch.Generator().manual_seed(0)).requires_grad_(True)
        target.evaluate(z.detach()[:100])  # warm-up: first calls allocate and start the energy workers
        held = {}
        forces = torch.randn(bg.generate(z.detach()[:1]).x.shape[1:], generator=torch.Generator().manual_seed(1))

        def forward():
            held["s"] = bg.generate(z)

        def backward():
            # through log q and through x, as the energy's forces flow back in `evaluate`
            s = held["s"]
            (s.log_q.sum() + (s.x * forces).sum()).backward(inputs=[z])

        forward_s, backward_s = _median_split(forward, backward, args.repeats)
        x = held["s"].x.detach().double().requires_grad_(True)
        energy_s = _median_s(lambda: energy.reduced_energy(x).sum().backward(inputs=[x]), args.repeats)
        evaluate_s = _median_s(lambda: target.evaluate(z.detach()), args.repeats)
    rate = args.n / evaluate_s
    print(f"run: {args.run}  model: {bg.config['kind']}  n: {args.n}  torch threads: {torch.get_num_threads()}")
    print(
        f"flow_forward_s: {forward_s:.3f}  flow_backward_s: {backward_s:.3f}  energy_forces_s: {energy_s:.3f}"
        f"  evaluate_s: {evaluate_s:.3f}  flow_share: {(forward_s + backward_s) / evaluate_s:.2f}"
    )
    print(f"evals_per_s: {rate:.0f}  minutes_100k_K20: {100_000 * EVALS_PER_SAMPLE_K20 / rate / 60:.1f}")
    if args.compile:
        print(compile_report(bg, z, forces, args.repeats))


if __name__ == "__main__":
    main()
