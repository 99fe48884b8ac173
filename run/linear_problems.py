"""Paper section 4.2 / appendix E: fit single linear layers to linear targets y = T x with SGD.

Three targets: a 32-dim positive definite T (eigenvalues in [0.6, 1.4]), a random T in SO(128),
and T = -I_101 (det -1, so training from A = I must cross det = 0). Each is fitted by a plain
linear layer, by P4Inv (y = (A + u v^T) x) and by an inverse P4Inv (y = (A + u v^T)^-1 x), all
starting from the identity, with SGD at lr 1e-2 on the squared error ||M x - y||^2, x ~ N(0, I).

The squared error is averaged over the batch and the n output dims (torch's MSE). The paper
leaves this scale open and it matters: a rank-one SGD step with N = 1 shrinks the error along v
by 1 - 2 lr |v|^2 / n (|v|^2 ~ n), and summing over dims instead (no 1/n) makes that factor
1 - 2 lr n, which diverges for lr 1e-2 at n = 101 and 128. With the mean the step is small,
and the paper's findings (N = 1 as fast as a plain layer, N = 50 about twice as slow) follow.

Writes to --out (default runs/linear_problems): <problem>_loss.png, <problem>_eigenvalues.png,
negeye_det_residual.png and summary.json; prints the summary. `--quick` is a < 30 s smoke run.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import matplotlib
import numpy as np
import torch
from matplotlib.figure import Figure

from bgp4.analysis.plots import STYLE
from bgp4.flows.p4inv import P4InvLinear, P4InvScheduler

__all__ = [
    "History",
    "Method",
    "Problem",
    "effective_matrix",
    "final_numbers",
    "main",
    "make_model",
    "make_problems",
    "negeye_summary",
    "parse_args",
    "plot_det_residual",
    "plot_eigenvalues",
    "plot_losses",
    "report_problem",
    "settings",
    "sgd_step",
    "step_counts",
    "train",
    "train_all",
]

LR = 1e-2
BATCH = 256
N_FORCE, N_CORRECT = 10, 50
LOSS_TOL = 1e-6  # "converged": the batch loss first falls below this
# Appendix A's penalty interval [C_min, C_max] = [-2, 15] for ln|G| and ln|G det A|, a little inside
# the merge bounds that P4InvLinear.penalty() uses by default.
PAPER_PENALTY_BOUNDS = {"c0_min": -2.0, "c0_max": 15.0, "c1_min": -2.0, "c1_max": 15.0}
COLORS = ("black", "tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")
HISTORY_KEYS = ("step", "error", "logabsdet", "sign", "residual", "tracked_logabsdet")
Scheduler = Optional[P4InvScheduler]  # None for a plain linear layer


@dataclass
class Method:
    label: str
    kind: str  # "linear", "p4inv" (trained forward) or "inverse" (trained through the inverse pass)
    merge_every: int = 1


@dataclass
class Problem:
    name: str
    target: torch.Tensor  # (n, n)
    penalty: float  # C_p of appendix A (0: no penalty)
    steps: int
    methods: list[Method]


def make_problems(seed: int, dtype: torch.dtype, steps: dict[str, int]) -> list[Problem]:
    """The three targets of the paper (appendix E), reproducible from `seed`."""
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(32, 32, generator=gen, dtype=torch.float64))
    eigenvalues = 1.0 + 0.4 * (2 * torch.rand(32, generator=gen, dtype=torch.float64) - 1)
    posdef = q @ torch.diag(eigenvalues) @ q.T
    q, r = torch.linalg.qr(torch.randn(128, 128, generator=gen, dtype=torch.float64))
    orth = q * torch.sign(torch.diagonal(r))  # Haar-distributed in O(128)
    if torch.linalg.det(orth) < 0:
        orth[:, 0] = -orth[:, 0]  # into SO(128)
    p4 = [Method("P4Inv N=1", "p4inv")]
    return [
        Problem(
            "posdef",
            posdef.to(dtype),
            0.1,
            steps["posdef"],
            [
                Method("linear", "linear"),
                *p4,
                Method("P4Inv N=10", "p4inv", 10),
                Method("P4Inv N=50", "p4inv", 50),
                Method("inverse P4Inv N=1", "inverse"),
            ],
        ),
        Problem(
            "orthogonal",
            orth.to(dtype),
            0.1,
            steps["orthogonal"],
            [Method("linear", "linear"), *p4, Method("inverse P4Inv N=1", "inverse")],
        ),
        Problem("negeye", -torch.eye(101, dtype=dtype), 0.0, steps["negeye"], [Method("linear", "linear"), *p4]),
    ]


def effective_matrix(model: torch.nn.Module, kind: str) -> torch.Tensor:
    """The matrix M the model applies, y = M x (n, n)."""
    if kind == "linear":
        return model.weight.detach()
    weight = model.weight().detach()
    return torch.linalg.inv(weight) if kind == "inverse" else weight


def make_model(method: Method, n: int, dtype: torch.dtype) -> tuple[torch.nn.Module, torch.optim.SGD, Scheduler]:
    """The identity as `method`'s layer, its SGD optimizer, and (P4Inv only) its merge schedule."""
    if method.kind == "linear":
        model = torch.nn.Linear(n, n, bias=False, dtype=dtype)
        with torch.no_grad():
            model.weight.copy_(torch.eye(n, dtype=dtype))
        return model, torch.optim.SGD(model.parameters(), lr=LR), None
    model = P4InvLinear(n, bias=False, dtype=dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    return model, optimizer, P4InvScheduler(model, optimizer, method.merge_every, N_FORCE, N_CORRECT)


@dataclass
class History:
    """What `train` records of M along the way: its numbers every few steps, its eigenvalues less often."""

    kind: str  # the Method's
    target: torch.Tensor
    p4inv: bool  # a P4Inv layer (stored inverse, tracked determinant)
    hist: dict[str, list[Any]] = field(default_factory=lambda: {k: [] for k in HISTORY_KEYS})
    eig_steps: list[int] = field(default_factory=list)
    eigs: list[np.ndarray] = field(default_factory=list)

    def record(self, model: torch.nn.Module, step: int, eigenvalues: bool) -> None:
        """Append step's error, log|det| and residual (and, if `eigenvalues`, the eigenvalues) of M."""
        m = effective_matrix(model, self.kind)
        sign, logabsdet = torch.linalg.slogdet(m)
        self.hist["step"].append(step)
        self.hist["error"].append((m - self.target).abs().max().item())
        self.hist["logabsdet"].append(logabsdet.item())
        self.hist["sign"].append(sign.item())
        self.hist["residual"].append(model.residual() if self.p4inv else 0.0)
        # P4Inv's own running log|det| (merges only), next to the recomputed one above.
        with torch.no_grad():
            tracked = model.slogdet()[1].item() if self.p4inv else logabsdet.item()
        self.hist["tracked_logabsdet"].append(-tracked if self.kind == "inverse" else tracked)
        if eigenvalues:
            self.eig_steps.append(step)
            self.eigs.append(torch.linalg.eigvals(m).numpy())


def sgd_step(
    model: torch.nn.Module,
    kind: str,
    optimizer: torch.optim.SGD,
    scheduler: Scheduler,
    x: torch.Tensor,
    y: torch.Tensor,
    penalty: float,
) -> float:
    """One SGD step on the batch (x, y); returns the squared error before the penalty."""
    if kind == "linear":
        pred = model(x)
    else:
        pred = (model(x) if kind == "p4inv" else model.inverse(x))[0]
    loss = ((pred - y) ** 2).mean()
    error = loss.item()
    if scheduler and penalty > 0:
        loss = loss + penalty * model.penalty(**PAPER_PENALTY_BOUNDS)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if scheduler:
        scheduler.step()
    return error


def final_numbers(
    losses: np.ndarray, hist: dict[str, list[Any]], seconds: float, model: torch.nn.Module, scheduler: Scheduler
) -> dict[str, Any]:
    """The run's summary: final loss and error, steps to convergence, det; for P4Inv its residual and schedule."""
    below = np.flatnonzero(losses < LOSS_TOL)
    result = {
        "seconds": seconds,
        "final_loss": float(losses[-10:].mean()),
        "steps_to_loss_1e-6": int(below[0]) + 1 if below.size else None,
        "final_max_error": hist["error"][-1],
        "final_sign_det": hist["sign"][-1],
        "final_logabsdet": hist["logabsdet"][-1],
    }
    if scheduler:
        result.update(
            final_residual=hist["residual"][-1], max_residual=max(hist["residual"]), schedule=dict(scheduler.stats)
        )
        # The layer's own bookkeeping of det, next to the one recomputed from the matrix.
        with torch.no_grad():
            sign, logabsdet = model.slogdet()
        result.update(tracked_sign_det=float(sign), tracked_logabsdet=float(logabsdet))
    return result


def train(problem: Problem, method: Method, seed: int, eig_records: int = 60) -> dict[str, Any]:
    """SGD on ||M x - T x||^2 / n from M = I; returns histories (numpy arrays) and final numbers."""
    target = problem.target
    n, dtype = target.shape[0], target.dtype
    torch.manual_seed(seed)  # v's initial and merge-time draws
    data = torch.Generator().manual_seed(seed + 1)  # the same batches for every method
    model, optimizer, scheduler = make_model(method, n, dtype)
    record_every = max(1, problem.steps // 400)
    eig_every = max(1, problem.steps // eig_records)
    losses = np.empty(problem.steps)
    history = History(method.kind, target, scheduler is not None)
    start = time.perf_counter()
    for step in range(problem.steps + 1):
        last = step == problem.steps
        if step % record_every == 0 or last:
            history.record(model, step, eigenvalues=step % eig_every == 0 or last)
        if last:
            break
        x = torch.randn(BATCH, n, generator=data, dtype=dtype)
        losses[step] = sgd_step(model, method.kind, optimizer, scheduler, x, x @ target.T, problem.penalty)
    result = final_numbers(losses, history.hist, time.perf_counter() - start, model, scheduler)
    return {
        "result": result,
        "loss": losses,
        "hist": {k: np.asarray(v) for k, v in history.hist.items()},
        "eig_steps": np.asarray(history.eig_steps),
        "eigs": np.stack(history.eigs),
    }


def _save(fig: Figure, path: Path) -> None:
    fig.savefig(path)
    print(f"wrote {path}")


def plot_losses(problem: Problem, runs: dict[str, dict[str, Any]], path: Path) -> None:
    fig = Figure(figsize=(4.2, 3.0))
    ax = fig.subplots()
    for color, (label, run) in zip(COLORS, runs.items()):
        loss = run["loss"]
        window = max(1, len(loss) // 200)  # a light running mean, batch noise hides the trend
        smooth = np.convolve(loss, np.ones(window) / window, mode="valid")
        ax.semilogy(np.arange(len(smooth)) + window, smooth, color=color, label=label)
    ax.set_xlabel("SGD step")
    ax.set_ylabel(r"loss $\|Mx - Tx\|^2 / n$")
    ax.set_title(f"{problem.name} (n = {problem.target.shape[0]})")
    ax.legend()
    _save(fig, path)


def plot_eigenvalues(problem: Problem, runs: dict[str, dict[str, Any]], path: Path) -> None:
    """Eigenvalues of M in the complex plane over training, one panel per method."""
    fig = Figure(figsize=(3.0 * len(runs) + 0.8, 3.1), layout="constrained")
    axes = fig.subplots(1, len(runs), squeeze=False)[0]
    target_eigs = torch.linalg.eigvals(problem.target).numpy()
    for ax, (label, run) in zip(axes, runs.items()):
        eigs, steps = run["eigs"], run["eig_steps"]
        colors = np.repeat(steps / max(steps[-1], 1), eigs.shape[1])
        ax.scatter(eigs.real.ravel(), eigs.imag.ravel(), c=colors, s=2, cmap="viridis", lw=0)
        ax.scatter(
            target_eigs.real,
            target_eigs.imag,
            marker="s",
            s=22,
            facecolors="none",
            edgecolors="black",
            lw=0.8,
            label="target",
        )
        ax.scatter(eigs[-1].real, eigs[-1].imag, marker="x", s=14, color="red", lw=0.8, label="final")
        ax.axhline(0, color="0.8", lw=0.5)
        ax.axvline(0, color="0.8", lw=0.5)
        ax.set_title(label)
        ax.set_xlabel("Re")
        ax.set_aspect("equal", adjustable="datalim")
    axes[0].set_ylabel("Im")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper")
    _save(fig, path)


def plot_det_residual(runs: dict[str, dict[str, Any]], path: Path) -> None:
    """-I_101: ln|det M| (recomputed, and P4Inv's tracked value) and the stored inverse's residual."""
    fig = Figure(figsize=(8.4, 3.0))
    ax_det, ax_res = fig.subplots(1, 2)
    for color, (label, run) in zip(COLORS, runs.items()):
        hist = run["hist"]
        ax_det.plot(hist["step"], hist["logabsdet"], color=color, label=label)
        if np.any(hist["residual"] > 0):
            ax_det.plot(hist["step"], hist["tracked_logabsdet"], color=color, ls="--", label=f"{label}, tracked")
            ax_res.semilogy(hist["step"], np.maximum(hist["residual"], 1e-17), color=color, label=label)
    ax_det.axhline(0.0, color="0.6", lw=0.6)
    ax_det.set_xlabel("SGD step")
    ax_det.set_ylabel(r"$\ln|\det M|$")
    ax_det.legend()
    ax_res.axhline(1e-5, color="0.6", ls="--", lw=0.8, label="1e-5")
    ax_res.set_xlabel("SGD step")
    ax_res.set_ylabel(r"max $|A A_{inv} - I|$")
    ax_res.legend()
    _save(fig, path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/linear_problems"))
    parser.add_argument("--steps", type=int, default=None, help="SGD steps for every problem")
    parser.add_argument("--quick", action="store_true", help="a < 30 s smoke run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--jobs", type=int, default=2, help="training runs in parallel (one thread each)")
    return parser.parse_args(argv)


def step_counts(args: argparse.Namespace) -> dict[str, int]:
    """SGD steps per problem: the full run's, or --quick's, or --steps for all."""
    steps = {"posdef": 20000, "orthogonal": 30000, "negeye": 50000}
    if args.quick:
        steps = {k: 150 for k in steps}
    if args.steps is not None:
        steps = {k: args.steps for k in steps}
    return steps


def train_all(jobs: list[tuple[Problem, Method]], seed: int, n_jobs: int) -> list[dict[str, Any]]:
    """`train` of every (problem, method), in that order; `n_jobs` processes of one thread each if > 1."""
    if n_jobs > 1:
        with ProcessPoolExecutor(n_jobs, initializer=torch.set_num_threads, initargs=(1,)) as pool:
            futures = [pool.submit(train, p, m, seed) for p, m in jobs]
            return [f.result() for f in futures]
    return [train(p, m, seed) for p, m in jobs]


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The summary's record of the fixed settings."""
    return {
        "lr": LR,
        "batch": BATCH,
        "data": "x ~ N(0, I)",
        "loss": "mean over batch and dims",
        "seed": args.seed,
        "dtype": args.dtype,
        "n_force": N_FORCE,
        "n_correct": N_CORRECT,
    }


def report_problem(problem: Problem, runs: dict[str, dict[str, Any]], out: Path) -> dict[str, Any]:
    """Print a line per method and plot the problem's figures; returns its entry of the summary."""
    for label, run in runs.items():
        r = run["result"]
        print(
            f"{problem.name:10s} {label:18s} loss {r['final_loss']:.2e}  max|M-T| {r['final_max_error']:.2e}"
            f"  steps to 1e-6: {r['steps_to_loss_1e-6']}  residual {r.get('final_residual', 0):.1e}"
            f" (max {r.get('max_residual', 0):.1e})  ({r['seconds']:.1f} s)"
        )
    plot_losses(problem, runs, out / f"{problem.name}_loss.png")
    plot_eigenvalues(problem, runs, out / f"{problem.name}_eigenvalues.png")
    return {"steps": problem.steps, "penalty": problem.penalty, **{label: run["result"] for label, run in runs.items()}}


def negeye_summary(r: dict[str, Any]) -> dict[str, Any]:
    """From P4Inv N=1's result on -I: whether it got there with a correct determinant and inverse."""
    return {
        "negeye_reached": bool(r["final_max_error"] < 1e-2 and r["tracked_sign_det"] < 0 and r["final_sign_det"] < 0),
        # Roundoff amplified while A is near singular: float64 keeps this near 1e-11.
        "negeye_tracked_logdet_error": r["tracked_logabsdet"] - r["final_logabsdet"],
        "negeye_inverse_recovered": bool(r["final_residual"] < 1e-5),
        "negeye_peak_residual": r["max_residual"],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train every method on every problem, plot, print and write the summary; returns it."""
    args = parse_args(argv)
    # Small matrices: one thread per run avoids thread-pool wake-ups that cost more than the math.
    torch.set_num_threads(1)
    steps = step_counts(args)
    args.out.mkdir(parents=True, exist_ok=True)
    problems = make_problems(args.seed, getattr(torch, args.dtype), steps)
    jobs = [(p, m) for p in problems for m in p.methods]
    done = train_all(jobs, args.seed, args.jobs)
    summary: dict[str, Any] = {"settings": settings(args)}
    with matplotlib.rc_context(STYLE):
        for problem in problems:
            runs = {m.label: run for (p, m), run in zip(jobs, done) if p is problem}
            summary[problem.name] = report_problem(problem, runs, args.out)
            if problem.name == "negeye":
                plot_det_residual(runs, args.out / "negeye_det_residual.png")
                summary.update(negeye_summary(runs["P4Inv N=1"]["result"]))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, default=_jsonable))
    print(f"negeye_reached: {summary['negeye_reached']}")
    print(f"negeye_inverse_recovered: {summary['negeye_inverse_recovered']}")
    print(f"negeye_peak_residual: {summary['negeye_peak_residual']:.2e}")
    print(f"negeye_tracked_logdet_error: {summary['negeye_tracked_logdet_error']:.2e}")
    print(f"wrote {args.out / 'summary.json'}")
    return summary


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return float(value)


if __name__ == "__main__":
    main()
