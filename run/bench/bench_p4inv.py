"""Paper section 4.1: cost of forward + inverse KL evaluation through one linear flow layer.

One evaluation = forward KL term (data x -> z with log|det|, NLL under N(0, I)) plus inverse KL
term (prior z -> x with log|det| of the inverse, energy 0.5 |x|^2), batch 32, float32, with
autograd recording as in training (add --backward to time the backward pass too). Layers:
  standard: W x + b, log|det| by torch.linalg.slogdet, inverse by torch.linalg.inv (O(n^3));
  lu:       P L U x + b, log|det| from diag(U), inverse by inverting L and U with
            torch.linalg.solve_triangular (the paper's baseline; O(n^3));
  lu_batchsolve: the same layer, inverse pass solving the batch directly (O(n^2 B));
  p4inv:    bgp4.flows.P4InvLinear (stored inverse and log|det|, rank-one perturbation).
Prints `<layer>_<device>_<n>_ms: <median ms per evaluation>` lines and the CPU speedups at n = 4096.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from bgp4.flows.base import Flow
from bgp4.flows.p4inv import P4InvLinear

__all__ = ["StandardLinear", "LULinear", "kl_evaluation", "time_layers", "main"]

BATCH = 32


class StandardLinear(Flow):
    """y = W x + b with inverse and log|det| recomputed from W on every call (O(n^3))."""

    def __init__(self, dim: int, device: torch.device):
        super().__init__()
        self.weight = nn.Parameter(torch.eye(dim, device=device) + 0.01 * torch.randn(dim, dim, device=device))
        self.bias = nn.Parameter(torch.zeros(dim, device=device))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logdet = torch.linalg.slogdet(self.weight)[1]
        return F.linear(x, self.weight, self.bias), logdet.expand(x.shape[0])

    def inverse(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logdet = torch.linalg.slogdet(self.weight)[1]
        return F.linear(y - self.bias, torch.linalg.inv(self.weight)), -logdet.expand(y.shape[0])


class LULinear(Flow):
    """y = P L U x + b: L unit lower, U upper triangular (trainable), P a fixed permutation.

    `invert_matrices=True` is the paper's LU baseline: the inverse pass inverts L and U with
    triangular solves against the identity (O(n^3)) and applies U^-1 L^-1 to the batch.
    `invert_matrices=False` solves the batch directly (two O(n^2 B) triangular solves), which
    is the cheaper choice whenever only a batch must be inverted.
    """

    def __init__(self, dim: int, device: torch.device, invert_matrices: bool = True):
        super().__init__()
        self.invert_matrices = invert_matrices
        self.lower = nn.Parameter(0.01 * torch.randn(dim, dim, device=device))
        self.upper = nn.Parameter(torch.eye(dim, device=device) + 0.01 * torch.randn(dim, dim, device=device))
        self.bias = nn.Parameter(torch.zeros(dim, device=device))
        self.register_buffer("perm", torch.randperm(dim, device=device))
        self.register_buffer("eye", torch.eye(dim, device=device))

    def _logdet(self) -> torch.Tensor:
        return torch.log(torch.abs(torch.diagonal(self.upper))).sum()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.linear(x, torch.triu(self.upper))  # U x
        h = h + F.linear(h, torch.tril(self.lower, -1))  # L U x with L = I + strict lower part
        y = torch.empty_like(h).index_copy(-1, self.perm, h) + self.bias  # P (L U x) + b
        return y, self._logdet().expand(x.shape[0])

    def inverse(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = (y - self.bias)[:, self.perm]  # P^T (y - b), rows are samples
        # solve_triangular reads only the named triangle, so the raw parameters serve as L and U.
        if self.invert_matrices:
            l_inv = torch.linalg.solve_triangular(self.lower, self.eye, upper=False, unitriangular=True)
            u_inv = torch.linalg.solve_triangular(self.upper, self.eye, upper=True)
            x = F.linear(F.linear(h, l_inv), u_inv)
        else:
            h = torch.linalg.solve_triangular(self.lower, h.T, upper=False, unitriangular=True)
            x = torch.linalg.solve_triangular(self.upper, h, upper=True).T
        return x, -self._logdet().expand(y.shape[0])


def kl_evaluation(flow: Flow, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Forward KL (NLL of data x under the flow, N(0, I) prior) + inverse KL (energy 0.5|x|^2)."""
    n = x.shape[-1]
    zf, ld_f = flow(x)
    nll = 0.5 * (zf**2).sum(-1) + 0.5 * n * math.log(2 * math.pi) - ld_f
    xi, ld_i = flow.inverse(z)
    reverse = 0.5 * (xi**2).sum(-1) - ld_i
    return nll.mean() + reverse.mean()


def time_layers(flows: dict[str, Flow], device: torch.device, backward: bool, budget_s: float) -> dict[str, float]:
    """Median seconds per evaluation for each flow, timed round-robin (one evaluation of each
    flow per round) so that load from other processes hits all of them alike. One warm-up,
    then rounds until `budget_s` per flow is spent (at least 3, at most 200)."""
    sync: Callable[[], None] = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    inputs = {}
    for name, flow in flows.items():
        n = next(flow.parameters()).shape[-1]
        inputs[name] = (torch.randn(BATCH, n, device=device), torch.randn(BATCH, n, device=device))

    def once(name: str) -> float:
        flow, (x, z) = flows[name], inputs[name]
        start = time.perf_counter()
        loss = kl_evaluation(flow, x, z)
        if backward:
            flow.zero_grad(set_to_none=True)
            loss.backward()
        sync()
        return time.perf_counter() - start

    for name in flows:
        once(name)  # warm-up: allocations, kernels, thread pool
    times: dict[str, list[float]] = {name: [] for name in flows}
    while True:
        for name in flows:
            times[name].append(once(name))
        rounds = len(times[name])
        spent = sum(sum(t) for t in times.values())
        if rounds >= 200 or (rounds >= 3 and spent >= budget_s * len(flows)):
            return {name: statistics.median(t) for name, t in times.items()}


def main(argv: list[str] | None = None) -> dict[tuple[str, str, int], float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[64, 512, 4096])
    parser.add_argument("--backward", action="store_true", help="also time loss.backward()")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds of repeats per layer and size")
    parser.add_argument("--cpu-only", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    torch.manual_seed(0)
    devices = [torch.device("cpu")]
    if torch.cuda.is_available() and not args.cpu_only:
        devices.append(torch.device("cuda"))
    layers = {
        "standard": StandardLinear,
        "lu": LULinear,
        "lu_batchsolve": lambda n, device: LULinear(n, device, invert_matrices=False),
        "p4inv": lambda n, device: P4InvLinear(n, init="reverse", device=device),
    }
    results: dict[tuple[str, str, int], float] = {}
    print(f"batch: {BATCH}, float32, backward: {args.backward}, cpu threads: {torch.get_num_threads()}")
    for device in devices:
        for n in args.dims:
            flows = {name: make(n, device) for name, make in layers.items()}
            with torch.no_grad():  # P4Inv in a generic perturbed state, not the bare permutation
                flows["p4inv"].u.normal_(std=0.01)
                flows["p4inv"].b.normal_(std=0.01)
            for name, seconds in time_layers(flows, device, args.backward, args.budget).items():
                results[(name, device.type, n)] = seconds
                print(f"{name}_{device.type}_{n}_ms: {1e3 * seconds:.3f}", flush=True)
            del flows
    largest = max(args.dims)
    for device in devices:
        p4 = results[("p4inv", device.type, largest)]
        suffix = "" if device.type == "cpu" else f"_{device.type}"
        for base in ("lu", "lu_batchsolve", "standard"):
            ratio = results[(base, device.type, largest)] / p4
            print(f"p4inv_speedup_vs_{base}_{largest}{suffix}: {ratio:.1f}")
    return results


if __name__ == "__main__":
    main()
