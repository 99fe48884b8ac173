"""The training loop's state and steps: optimizer and P4Inv scheduler, learning-rate schedule,
one step's loss and update, and the metrics records.

Phase "ml" (steps 0..steps): Adam on the negative log-likelihood of MD frames (nats per frame,
Cartesian density); AdamW with `weight_decay`, which decays the weight matrices alone. Phase
"energy" (energy_steps more): a fresh Adam on the run's objective (`bgp4.generator.objectives`:
mixed, the paper's w_l * NLL + w_e * reverse KL; kl; fab), with u in kT from the OpenMM bridge.
With `keep_best`, the likelihood phase ends with the weights of its lowest test NLL (of the
evaluations every eval_every steps, its start and end included): early stopping on the held-out
frames, which then also select the model. The P4Inv schedule runs after every optimizer step in
both phases. The learning rate is a function of the step and every other piece of state (the
objective's replay buffer and the best weights included) is in `state_dict`, so that a run
resumed from a checkpoint equals an unbroken one.
A run without MD data (`data` None: kl or fab from a finished run) has no likelihood phase and no
test NLL.
"""

from __future__ import annotations

import copy
import math
import re
import sys
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from bgp4.errors import first_line
from bgp4.flows import P4InvScheduler
from bgp4.generator.losses import grad_norm, likelihood_loss, p4inv_penalty
from bgp4.generator.objectives import make_objective
from bgp4.kinds import get_kind, get_objective

if TYPE_CHECKING:
    from bgp4._rng import PrivateRNG
    from bgp4.generator.model import BoltzmannGenerator
    from bgp4.generator.rundir import RunDirectory
    from bgp4.generator.training_data import TrainingData
    from bgp4.settings import TrainSettings

__all__ = ["LOG_EVERY", "TrainingLoop", "scheduled_lr"]

LOG_EVERY = 100  # steps between metrics records (train NLL averaged over them)


def scheduled_lr(lr: float, schedule: str, step: int, steps: int) -> float:
    """The learning rate at `step` of a phase of `steps`: `lr` (constant), or cosine decay from `lr`
    to 1 % of it (cosine).

    >>> scheduled_lr(1e-3, "cosine", 100, 100)
    1e-05
    """
    if schedule == "cosine":
        return lr * (0.01 + 0.99 * 0.5 * (1.0 + math.cos(math.pi * step / max(1, steps))))
    return lr


def _is_weight_matrix(name: str, p: torch.Tensor) -> bool:
    """Whether a parameter is a layer's weight matrix: at least 2-d and not a bias. nn.Linear names
    its bias `bias`; the paper's affine couplings stack theirs as `b1`..`b3`, shape (2, 1, h)."""
    leaf = name.rsplit(".", 1)[-1]
    return p.ndim >= 2 and leaf != "bias" and re.fullmatch(r"b\d*", leaf) is None


def _decay_groups(module: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW parameter groups: the coupling nets' weight matrices decay; biases, the affine
    couplings' scale and the P4Inv layers' vectors do not."""
    decayed: list[torch.Tensor] = []
    kept: list[torch.Tensor] = []
    for name, p in module.named_parameters():
        (decayed if _is_weight_matrix(name, p) else kept).append(p)
    return [{"params": decayed, "weight_decay": weight_decay}, {"params": kept, "weight_decay": 0.0}]


class TrainingLoop:
    """Optimizer, P4Inv scheduler and counters of one run; `advance` takes one step.

    Attributes: step (global steps taken), skipped (steps whose loss or gradient was not
    finite), wall (s of training, compiling included), energy_evaluations (target energy
    evaluations of the objective: flow samples, AIS moves), interval (step infos since the last
    metrics record), batch_nll (the likelihood of training batches: `nll`, or its torch.compile'd
    twin after `compile`), sample_gen (the energy phase's sample stream, seed + 2), objective (the
    energy phase's, None for ml), data (None without MD data), best (with keep_best: the
    likelihood phase's lowest test NLL so far, {"step", "test_nll", "model"}, without "model"
    once restored; None before one). The metrics record of the last likelihood step keeps that
    step's own test NLL; the run's summary names the kept step.
    """

    def __init__(
        self,
        settings: TrainSettings,
        bg: BoltzmannGenerator,
        data: TrainingData | None,
        run: RunDirectory,
        rng: PrivateRNG,
        device: torch.device,
    ):
        self.s, self.bg, self.data, self.run, self.rng, self.device = settings, bg, data, run, rng, device
        self.sample_gen = torch.Generator(device=device).manual_seed(settings.seed + 2)
        self.step = 0
        self.skipped = 0
        self.energy_evaluations = 0
        self.wall = 0.0
        self.interval: list[dict[str, float]] = []
        self.best: dict[str, Any] | None = None
        self.batch_nll = self.nll
        self.scheduler = None
        self.objective = make_objective(
            settings, bg, self.sample_gen, lambda y, logdet: self.batch_nll(y, logdet), self.data_nll
        )
        self.make_optimizer()

    # -- state -------------------------------------------------------------------------
    @property
    def total_steps(self) -> int:
        return self.s.steps + self.s.energy_steps

    @property
    def nll_steps(self) -> int:
        """Steps whose loss goes through `batch_nll`: likelihood steps, plus mixed or FAB energy steps."""
        return self.s.steps + (self.s.energy_steps if get_objective(self.s.objective).nll_in_energy_phase else 0)

    @property
    def phase(self) -> str:
        return "ml" if self.step < self.s.steps else "energy"

    @property
    def at_phase_end(self) -> bool:
        """Whether the step just taken ended a phase."""
        return self.step in (self.s.steps, self.total_steps)

    @property
    def compiled(self) -> bool:
        """Whether training batches go through the torch.compile'd likelihood."""
        return self.batch_nll != self.nll

    @property
    def md_frames(self) -> int:
        """MD frames the run's losses draw from: the training frames, when a likelihood term is
        trained (likelihood steps, or mixed energy steps); 0 otherwise."""
        uses = self.s.steps > 0 or (get_objective(self.s.objective).md_in_energy_phase and self.s.energy_steps > 0)
        return self.data.n_train if self.data is not None and uses else 0

    @property
    def p4inv_layers(self) -> list:
        """The generator's P4Inv layers (the scheduler's list)."""
        return self.scheduler.layers

    def make_optimizer(self) -> None:
        """A fresh Adam (AdamW in the likelihood phase with `weight_decay`) at the phase's learning
        rate, and a P4Inv scheduler on it (which keeps the previous scheduler's counters)."""
        lr = self.s.lr if self.phase == "ml" else self.s.energy_lr
        # fused Adam is one kernel for all ~400 tensors: 6-8 ms less per step on CPU
        if self.phase == "ml" and self.s.weight_decay > 0:
            self.optimizer = torch.optim.AdamW(_decay_groups(self.bg, self.s.weight_decay), lr=lr, fused=True)
        else:
            self.optimizer = torch.optim.Adam(self.bg.parameters(), lr=lr, fused=True)
        previous = self.scheduler
        self.scheduler = P4InvScheduler(
            self.bg, self.optimizer, self.s.merge_every, self.s.force_every, self.s.correct_every
        )
        if previous is not None:
            self.scheduler.load_state_dict(previous.state_dict())

    def state_dict(self) -> dict[str, Any]:
        """Counters, optimizer, scheduler and sample stream (keys of the checkpoint file)."""
        return {
            "step": self.step,
            "skipped": self.skipped,
            "wall": self.wall,
            "energy_evaluations": self.energy_evaluations,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "sample_rng": self.sample_gen.get_state(),
            "interval": self.interval,
            **({"objective": self.objective.state_dict()} if self.objective is not None else {}),
            **({"best": self.best} if self.best is not None else {}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take up `state_dict`'s state (checkpoints of older versions lack some keys)."""
        self.step, self.skipped, self.wall = state["step"], state["skipped"], state["wall"]
        self.energy_evaluations = int(state.get("energy_evaluations", 0))
        self.interval = list(state.get("interval", []))
        self.best = state.get("best")
        self.make_optimizer()  # at the learning rate of the checkpoint's phase
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if "sample_rng" in state:
            self.sample_gen.set_state(state["sample_rng"].cpu())
        if self.objective is not None and "objective" in state:
            self.objective.load_state_dict(state["objective"])

    # -- numerics ------------------------------------------------------------------------
    def nll(self, y: torch.Tensor, logdet_cart: torch.Tensor) -> torch.Tensor:
        """-log q (B,) nats of frames given as flow coordinates y and log|dy/dx| (eager)."""
        return likelihood_loss(self.bg, y, logdet_cart)

    def compile(self, progress: bool) -> None:
        """Use a torch.compile'd likelihood for training batches when settings ask for it.

        One warm-up batch (forward and backward, no update) compiles both graphs up front, so a
        failure (no C++ compiler, unsupported platform) shows here and training goes on eagerly.
        Evaluation keeps the eager path: other batch sizes and no_grad would mean more graphs.
        """
        mode = self.s.compile
        min_steps = get_kind(self.bg.config["kind"]).compile_min_steps
        too_short = self.device.type != "cpu" or self.nll_steps < min_steps
        if self.compiled or self.data is None or mode == "off" or (mode == "auto" and too_short):
            return
        if progress:
            print(
                "compiling the flow with torch.compile (about a minute the first time) ...", file=sys.stderr, flush=True
            )
        started = time.perf_counter()
        compiled = torch.compile(self.nll, dynamic=False)
        y, logdet = self.data.first(self.s.batch)
        try:
            compiled(y, logdet).mean().backward()
        except Exception as error:  # noqa: BLE001 - any compiler failure means: train without it
            print(f"torch.compile failed ({first_line(error, typed=True)}); training without it", file=sys.stderr)
            return
        finally:
            self.optimizer.zero_grad(set_to_none=True)
            self.wall += time.perf_counter() - started  # compile time is part of the run's cost
        self.batch_nll = compiled

    def data_nll(self) -> torch.Tensor:
        """Mean NLL (0-dim, nats per frame) of a training batch drawn from the batch stream."""
        return self.batch_nll(*self.data.batch(self.data.draw(self.s.batch))).mean()

    def test_nll(self) -> tuple[float | None, int]:
        """Mean negative log-likelihood (nats per frame) of the held-out frames whose NLL is finite
        (None without data), and how many are not."""
        if self.data is None:
            return None, 0
        with torch.no_grad():
            nll = torch.cat([self.nll(y, ld) for y, ld in self.data.test_batches()])
        finite = torch.isfinite(nll)
        return float(nll[finite].mean()), int((~finite).sum())

    def loss(self, energy) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss of one batch (and its infos for the metrics) in the current phase; `energy`:
        the OpenMM energy (reduced, kT) in the energy phase."""
        if self.phase == "ml":
            nll = self.data_nll()
            loss, info = nll, {"train_nll": float(nll.detach())}
        else:
            loss, info, evaluations = self.objective.loss(energy)
            self.energy_evaluations += evaluations
        if self.s.penalty_weight > 0 and self.p4inv_layers:
            penalty = p4inv_penalty(self.p4inv_layers)
            info["p4inv_penalty"] = float(penalty.detach())
            loss = loss + self.s.penalty_weight * penalty
        return loss, info

    def learning_rate(self) -> float:
        """The learning rate of the current step: each phase's, constant or cosine decay to 1 % over its steps."""
        if self.phase == "energy":
            return scheduled_lr(
                self.s.energy_lr, self.s.energy_lr_schedule, self.step - self.s.steps, self.s.energy_steps
            )
        return scheduled_lr(self.s.lr, self.s.lr_schedule, self.step, self.s.steps)

    def train_step(self, energy) -> dict[str, float] | None:
        """One update (the counters stay); None where the loss or gradient was not finite (nothing applied)."""
        self.optimizer.zero_grad(set_to_none=True)
        for group in self.optimizer.param_groups:  # a function of the step: resumes exactly
            group["lr"] = self.learning_rate()
        loss, info = self.loss(energy)
        if not torch.isfinite(loss):
            self.skipped += 1
            return None
        loss.backward()
        if self.s.clip_grad > 0:
            norm = torch.nn.utils.clip_grad_norm_(self.bg.parameters(), self.s.clip_grad)
        else:
            norm = grad_norm(self.bg.parameters())
        if not torch.isfinite(norm):
            self.optimizer.zero_grad(set_to_none=True)
            self.skipped += 1
            return None
        self.optimizer.step()
        with self.rng:  # a P4Inv merge redraws v
            self.scheduler.step()
        return {**info, "grad_norm": float(norm)}  # before clipping: whether --clip-grad binds

    # -- the loop ------------------------------------------------------------------------
    def advance(self, energy) -> dict[str, Any] | None:
        """Take one step and count it; returns the metrics record when one was due (and logged).

        At the end of the likelihood phase the energy phase starts with a fresh Adam.
        """
        started = time.perf_counter()
        info = self.train_step(energy)
        self.step += 1
        self.wall += time.perf_counter() - started
        if info is not None:
            self.interval.append(info)
        record = None
        evaluate = self.at_phase_end or self.step % self.s.eval_every == 0
        if evaluate or self.step % LOG_EVERY == 0:
            record = self.record(self.interval, test=evaluate)
            self.interval = []
        if self.step == self.s.steps and self.best is not None and "model" in self.best:
            self.bg.load_state_dict(self.best["model"])  # keep_best: the phase ends with its best weights
            self.best = {k: v for k, v in self.best.items() if k != "model"}  # no second copy in the checkpoint
        if self.step == self.s.steps and self.s.energy_steps:
            self.make_optimizer()  # phase 2 starts with a fresh Adam at the energy lr
        return record

    def record(self, interval: list[dict[str, float]], test: bool) -> dict[str, Any]:
        """Log (metrics.jsonl) and return the record of the step just taken: `interval`'s infos
        averaged, the test NLL when `test`, counters, learning rate and P4Inv statistics."""
        in_ml = self.step <= self.s.steps  # the phase of the step just taken
        record: dict[str, Any] = {
            "global_step": self.step,
            "phase": "ml" if in_ml else "energy",
            "step": self.step if in_ml else self.step - self.s.steps,
        }
        for key in sorted({k for r in interval for k in r}):
            values = [r[key] for r in interval if key in r and math.isfinite(r[key])]
            record[key] = float(np.mean(values)) if values else None
        if test:
            record["test_nll"], nonfinite = self.test_nll()
            if nonfinite:
                record["test_nll_nonfinite"] = nonfinite
            if in_ml:
                self.track_best(record["test_nll"], nonfinite)
        record.update(
            skipped_steps=self.skipped,
            lr=self.optimizer.param_groups[0]["lr"],
            wall_s=round(self.wall, 2),
            energy_evaluations=self.energy_evaluations,
            md_frames=self.md_frames,
        )
        record.update(self.p4inv_stats())
        self.run.log(record)
        return record

    def track_best(self, test_nll: float | None, nonfinite: int = 0) -> None:
        """keep_best: remember the weights when `test_nll` (of the likelihood phase) is the lowest yet.
        Weights that give any held-out frame an infinite NLL are never kept: the mean leaves those out."""
        if not self.s.keep_best or self.s.steps == 0 or test_nll is None or not math.isfinite(test_nll) or nonfinite:
            return
        if self.best is None or test_nll < self.best["test_nll"]:
            model = copy.deepcopy(self.bg.state_dict())
            self.best = {"step": self.step, "test_nll": float(test_nll), "model": model}

    def p4inv_stats(self) -> dict[str, float]:
        """The P4Inv scheduler's statistics as p4inv_<name> (none without P4Inv layers)."""
        return {f"p4inv_{k}": v for k, v in self.scheduler.stats.items()} if self.scheduler.layers else {}
