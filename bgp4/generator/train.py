"""Training a Boltzmann generator as in the paper: maximum likelihood, then likelihood + energy.

Phase "ml": Adam on the negative log-likelihood of MD frames (nats per frame, Cartesian density).
Phase "energy": Adam on w_l * NLL + w_e * reverse KL, where the reverse KL term is the mean of
u(x) + log q(x) over flow samples (u in kT from the OpenMM bridge, regularized). The P4Inv
schedule runs after every optimizer step in both phases. Every piece of state (model, optimizer,
scheduler, random generators, counters) is checkpointed, so a resumed run equals an unbroken one.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bgp4._rng import PrivateRNG
from bgp4._stop import StopRequest
from bgp4.errors import InputError
from bgp4.generator.losses import energy_phase_loss, grad_norm, likelihood_loss, p4inv_penalty  # noqa: F401 - part of this API
from bgp4.generator.model import weights_defined
from bgp4.generator.rundir import CHECKPOINT, COMPLETE, MODEL, RunDirectory, check_init
from bgp4.platform import resolve_device
from bgp4.settings import MODELS, TrainSettings, changed_settings, same_data, settings_record  # noqa: F401 - part of this API
from bgp4.simulation.data import TrajectoryData, load_trajectory, relabel_rotors, resolve_temperature
from bgp4.simulation.molecule import rotor_hydrogens

LOG_EVERY = 100  # steps between metrics records (train NLL averaged over them)
TEST_FRAMES = 10_000  # held-out frames scored at each evaluation
# Compiling takes about a minute on 2 cores and saves ~25 ms per paper-size step: worth it from here on.
COMPILE_MIN_STEPS = 3_000


class Trainer:
    """One run: data, generator, optimizer, P4Inv scheduler and the run directory they write to."""

    def __init__(self, settings: TrainSettings, run: RunDirectory, data: TrajectoryData, molecule=None):
        from bgp4.generator.model import build_generator
        from bgp4.simulation.data import train_test_split

        self.s, self.run = settings, run
        self.molecule = molecule if molecule is not None else data.molecule()
        self.device = resolve_device(settings.device)
        train_idx, test_idx = train_test_split(data.n_frames, settings.test_fraction, settings.seed)
        run.save_split(train_idx, test_idx)
        self.temperature = resolve_temperature(data.settings.get("temperature"), settings.temperature, settings.data)
        # initialization and P4Inv's redraws of v use torch's global generators: give them a
        # private stream, so the caller's generators stay untouched and a resume stays exact
        self.rng = PrivateRNG(settings.seed, self.device)
        with self.rng:
            self.bg = build_generator(
                settings.model,
                data.xyz[train_idx],
                self.molecule,
                blocks=settings.blocks,
                hidden=settings.hidden,
                fix_constrained=settings.fix_constrained,
                bins=settings.bins,
            ).to(self.device)
        # the coordinate transform is fixed, so frames are mapped to flow coordinates once, unless
        # each batch relabels its frames first (augment)
        triples = rotor_hydrogens(self.molecule) if settings.augment else []
        self.rotors = np.array(triples, dtype=np.int64).reshape(-1, 3)
        self.train_xyz = data.xyz[train_idx] if settings.augment else None
        self.train_y = None if settings.augment else self._flow_coordinates(data.xyz[train_idx])
        self.n_train = int(train_idx.size)
        test_pick = np.random.default_rng(settings.seed).permutation(test_idx.size)[:TEST_FRAMES]
        self.test_y = self._flow_coordinates(data.xyz[test_idx[np.sort(test_pick)]])
        self.batch_gen = torch.Generator().manual_seed(settings.seed + 1)
        self.sample_gen = torch.Generator(device=self.device).manual_seed(settings.seed + 2)  # energy-phase samples
        self.step = 0
        self.skipped = 0
        self.energy_evaluations = 0  # OpenMM energy+force calls spent on training
        self.wall = 0.0
        self.interval: list[dict[str, float]] = []  # step infos since the last metrics record
        self.batch_nll = self._nll  # replaced by a compiled twin in `_compile`
        self._openmm = None  # OpenMMEnergy of the energy phase, opened when first needed
        self._saved: tuple[int, ...] | None = None  # the checkpoint file as this Trainer last wrote it
        self._make_optimizer()

    # -- state -------------------------------------------------------------------------
    @property
    def total_steps(self) -> int:
        return self.s.steps + self.s.energy_steps

    @property
    def compiled(self) -> bool:
        """Whether training batches go through the torch.compile'd likelihood."""
        return self.batch_nll != self._nll

    @property
    def p4inv_layers(self) -> list:
        """The generator's P4Inv layers (the scheduler's list)."""
        return self.scheduler.layers

    @property
    def phase(self) -> str:
        return "ml" if self.step < self.s.steps else "energy"

    def _make_optimizer(self) -> None:
        from bgp4.flows import P4InvScheduler

        lr = self.s.lr if self.phase == "ml" else self.s.energy_lr
        # fused Adam is one kernel for all ~400 tensors: 6-8 ms less per step on CPU
        self.optimizer = torch.optim.Adam(self.bg.parameters(), lr=lr, fused=True)
        previous = getattr(self, "scheduler", None)
        self.scheduler = P4InvScheduler(
            self.bg, self.optimizer, self.s.merge_every, self.s.force_every, self.s.correct_every
        )
        if previous is not None:
            self.scheduler.load_state_dict(previous.state_dict())

    def checkpoint(self) -> None:
        self.run.save_torch(
            CHECKPOINT,
            {
                "step": self.step,
                "skipped": self.skipped,
                "wall": self.wall,
                "energy_evaluations": self.energy_evaluations,
                "model": self.bg.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "rng": self.rng.state_dict(),
                "batch_rng": self.batch_gen.get_state(),
                "sample_rng": self.sample_gen.get_state(),
                "interval": self.interval,
            },
        )
        self._saved = self.run.signature(CHECKPOINT)

    def restore(self) -> bool:
        """Load the last checkpoint if there is one (unless this Trainer wrote it and has trained no
        further: a sweep's next part on the same worker); returns whether there was one."""
        if not self.run.file(CHECKPOINT).exists():
            return False
        if self._saved is not None and self._saved == self.run.signature(CHECKPOINT):
            self.run.truncate_log(self.step)  # records of a part another worker began after it
            return True
        state = self.run.load_torch(CHECKPOINT, map_location=self.device)
        self.step, self.skipped, self.wall = state["step"], state["skipped"], state["wall"]
        self.energy_evaluations = int(state.get("energy_evaluations", 0))
        self.interval = list(state.get("interval", []))
        self.bg.load_state_dict(state["model"])
        self._make_optimizer()
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.rng.load_state_dict(state["rng"] if "rng" in state else {"cpu": state["torch_rng"]})  # or older
        self.batch_gen.set_state(state["batch_rng"].cpu())
        if "sample_rng" in state:
            self.sample_gen.set_state(state["sample_rng"].cpu())
        self.run.truncate_log(self.step)
        return True

    # -- numerics ------------------------------------------------------------------------
    def _flow_coordinates(self, xyz: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Frames (n, n_atoms, 3) nm -> flow coordinates (n, dims) and log|dy/dx| (n,) on the device."""
        with torch.no_grad():
            parts = [
                self.bg.flow_coordinates(torch.as_tensor(c, device=self.device))
                for c in np.array_split(xyz, max(1, len(xyz) // 8192))
            ]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    def _train_batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Flow coordinates and log|dy/dx| of the training frames `idx` (relabelled at random with augment)."""
        if self.train_xyz is None:
            idx = idx.to(self.device)
            return self.train_y[0][idx], self.train_y[1][idx]
        shifts = torch.randint(3, (len(idx), len(self.rotors)), generator=self.batch_gen).numpy()
        xyz = relabel_rotors(self.train_xyz[idx.numpy()], self.rotors, shifts)
        with torch.no_grad():
            return self.bg.flow_coordinates(torch.as_tensor(xyz, device=self.device))

    def _nll(self, y: torch.Tensor, logdet_cart: torch.Tensor) -> torch.Tensor:
        return likelihood_loss(self.bg, y, logdet_cart)

    def _compile(self, progress: bool) -> None:
        """Use a torch.compile'd likelihood for training batches when settings ask for it.

        One warm-up batch (forward and backward, no update) compiles both graphs up front, so a
        failure (no C++ compiler, unsupported platform) shows here and training goes on eagerly.
        Evaluation keeps the eager path: other batch sizes and no_grad would mean more graphs.
        """
        mode = self.s.compile
        if (
            self.compiled
            or mode == "off"
            or (mode == "auto" and (self.device.type != "cpu" or self.total_steps < COMPILE_MIN_STEPS))
        ):
            return
        if progress:
            print(
                "compiling the flow with torch.compile (about a minute the first time) ...", file=sys.stderr, flush=True
            )
        started = time.perf_counter()
        compiled = torch.compile(self._nll, dynamic=False)
        if self.train_xyz is None:
            idx = torch.arange(self.s.batch, device=self.device)  # a fresh tensor, like a real batch
            y, logdet = self.train_y[0][idx], self.train_y[1][idx]
        else:  # frames as simulated: drawing relabellings here would shift the batch stream on resume
            y, logdet = self._flow_coordinates(self.train_xyz[: self.s.batch])
        try:
            compiled(y, logdet).mean().backward()
        except Exception as error:  # noqa: BLE001 - any compiler failure means: train without it
            message = (str(error).strip().splitlines() or [""])[0][:200]
            print(f"torch.compile failed ({type(error).__name__}: {message}); training without it", file=sys.stderr)
            return
        finally:
            self.optimizer.zero_grad(set_to_none=True)
            self.wall += time.perf_counter() - started  # compile time is part of the run's cost
        self.batch_nll = compiled

    def test_nll(self) -> float:
        """Mean negative log-likelihood (nats per frame) of the held-out frames."""
        with torch.no_grad():
            nll = torch.cat([self._nll(y, ld) for y, ld in zip(self.test_y[0].split(4096), self.test_y[1].split(4096))])
        return float(nll[torch.isfinite(nll)].mean())

    def _loss(self, energy) -> tuple[torch.Tensor, dict[str, float]]:
        idx = torch.randint(self.n_train, (self.s.batch,), generator=self.batch_gen)
        nll = self.batch_nll(*self._train_batch(idx)).mean()
        if self.phase == "ml":
            loss, info = nll, {"train_nll": float(nll.detach())}
        else:
            x, log_q, ok, _ = self.bg.sample(self.s.batch, generator=self.sample_gen)
            raw = energy.reduced_energy(x)  # kT; +inf where OpenMM could not evaluate
            self.energy_evaluations += int(x.shape[0])
            loss, info = energy_phase_loss(nll, raw, log_q, ok, self.s.energy_weight)
        if self.s.penalty_weight > 0 and self.p4inv_layers:
            penalty = p4inv_penalty(self.p4inv_layers)
            info["p4inv_penalty"] = float(penalty.detach())
            loss = loss + self.s.penalty_weight * penalty
        return loss, info

    def learning_rate(self) -> float:
        """The learning rate of the current step: constant, or cosine decay to 1 % over the likelihood phase."""
        if self.phase == "energy":
            return self.s.energy_lr
        if self.s.lr_schedule == "cosine":
            return self.s.lr * (0.01 + 0.99 * 0.5 * (1.0 + math.cos(math.pi * self.step / max(1, self.s.steps))))
        return self.s.lr

    def _train_step(self, energy) -> dict[str, float] | None:
        self.optimizer.zero_grad(set_to_none=True)
        for group in self.optimizer.param_groups:  # a function of the step: resumes exactly
            group["lr"] = self.learning_rate()
        loss, info = self._loss(energy)
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
        return info

    def _record(self, interval: list[dict[str, float]], test: bool) -> dict[str, Any]:
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
            record["test_nll"] = self.test_nll()
        record.update(
            skipped_steps=self.skipped,
            lr=self.optimizer.param_groups[0]["lr"],
            wall_s=round(self.wall, 2),
            energy_evaluations=self.energy_evaluations,
        )
        if self.scheduler.layers:
            record.update({f"p4inv_{k}": v for k, v in self.scheduler.stats.items()})
        self.run.log(record)
        return record

    # -- the loop ------------------------------------------------------------------------
    def fit(
        self, progress: bool = True, stop: Callable[[], bool] | None = None, until: int | None = None
    ) -> dict[str, Any] | None:
        """Train to the last step (resuming from the checkpoint), save model.pt; returns the summary
        that `train` writes to complete.json. Ctrl-C, SIGTERM or `stop()` turning true save a
        checkpoint at the next step boundary and raise KeyboardInterrupt.

        `until`: train only to that global step, save a checkpoint there and return None: one part
        of the run (a sweep hands out runs in parts). The OpenMM workers then stay open for the next
        part; `close()` ends them.
        """
        from tqdm.auto import tqdm

        if not self.restore():
            self.run.truncate_log(-1)  # records of a run killed before its first checkpoint
            if self.s.init:
                from bgp4.generator.model import load_generator

                self.bg.load_state_dict(load_generator(RunDirectory(self.s.init).file(MODEL), self.device).state_dict())
            self._record([], test=True)
        end = self.total_steps if until is None else min(until, self.total_steps)
        self._compile(progress)
        energy = self._energy() if end > self.s.steps else None
        bar = tqdm(total=self.total_steps, initial=self.step, desc=self.phase, disable=not progress, unit="step")
        last_save, record = time.monotonic(), {}
        request = StopRequest(also=stop)
        self._saved = None  # the state moves on from the checkpoint with the first step
        try:
            while self.step < end:
                started = time.perf_counter()
                info = self._train_step(energy)
                self.step += 1
                self.wall += time.perf_counter() - started
                if info is not None:
                    self.interval.append(info)
                phase_end = self.step in (self.s.steps, self.total_steps)
                if self.step % LOG_EVERY == 0 or self.step % self.s.eval_every == 0 or phase_end:
                    test = phase_end or self.step % self.s.eval_every == 0
                    record = self._record(self.interval, test=test)
                    self.interval = []
                    bar.set_postfix(
                        {
                            k: f"{record[k]:.3g}"
                            for k in ("train_nll", "test_nll", "energy_kT")
                            if record.get(k) is not None
                        }
                    )
                if self.step == self.s.steps and self.s.energy_steps:
                    self._make_optimizer()  # phase 2 starts with a fresh Adam at the energy lr
                    bar.set_description("energy")
                if phase_end or self.step == end or time.monotonic() - last_save > 60 * self.s.checkpoint_minutes:
                    self.checkpoint()
                    last_save = time.monotonic()
                bar.update(1)
                if request.requested:  # Ctrl-C, SIGTERM or stop(): save at a step boundary, then stop
                    self.checkpoint()
                    raise KeyboardInterrupt
        except BaseException:
            self._saved = None  # it may have trained on after its last checkpoint
            self.close()
            raise
        finally:
            request.restore()
            bar.close()
        if until is None or self.step >= self.total_steps:
            self.close()
        return self._finish() if self.step >= self.total_steps else None

    def _energy(self):
        """The OpenMM energy of the energy phase (worker processes, kept open between parts)."""
        if self._openmm is None:
            from bgp4.simulation.energy import OpenMMEnergy

            self._openmm = OpenMMEnergy(self.molecule.system, self.temperature, n_workers=self.s.workers or None)
        return self._openmm

    def close(self) -> None:
        """Stop the OpenMM worker processes, if any are open."""
        if self._openmm is not None:
            self._openmm.close()
            self._openmm = None

    def _finish(self) -> dict[str, Any]:
        self.bg.save(self.run.file(MODEL))
        records = list(self.run.records())
        tests = [r["test_nll"] for r in records if r.get("test_nll") is not None]
        summary = {
            "steps": self.total_steps,
            "skipped_steps": self.skipped,
            "wall_s": round(self.wall, 1),
            "test_nll_start": tests[0] if tests else None,
            "test_nll_end": tests[-1] if tests else None,
            "temperature": self.temperature,
            "device": str(self.device),
            "compiled": self.compiled,
            "energy_evaluations": self.energy_evaluations,
            "n_dims": self.bg.n_dims,
            "molecule": self.molecule.name,
            "parameters": sum(p.numel() for p in self.bg.parameters() if p.requires_grad),
            **weights_defined(self.bg, self.molecule),
            **({f"p4inv_{k}": v for k, v in self.scheduler.stats.items()} if self.scheduler.layers else {}),
        }
        return summary


def train(
    settings: TrainSettings,
    out: str | Path,
    overwrite: bool = False,
    progress: bool = True,
    stop: Callable[[], bool] | None = None,
) -> tuple[dict[str, Any], bool]:
    """Train (or resume, or find complete) the run in `out`; returns (summary, newly_trained).

    `stop`: asked between steps; true saves a checkpoint and raises KeyboardInterrupt (as Ctrl-C).
    """
    trainer = prepare_training(settings, out, overwrite)
    if isinstance(trainer, dict):
        return trainer, False
    summary = trainer.fit(progress=progress, stop=stop)
    finish_training(trainer, summary)
    return summary, True


def prepare_training(settings: TrainSettings, out: str | Path, overwrite: bool = False) -> Trainer | dict[str, Any]:
    """Check the settings and data, prepare the run directory `out` and build its Trainer (which
    resumes from the checkpoint when it fits); the summary instead when the run is complete."""
    import json

    s = settings.validated()
    run = RunDirectory(out)
    record = settings_record(s)
    if run.complete and not overwrite:
        differ = changed_settings(run.settings(), record)
        if differ:
            raise InputError(
                f"{run.path} holds a finished run with other settings ({', '.join(differ)}); "
                "use another --out or --overwrite"
            )
        return json.loads(run.file(COMPLETE).read_text())
    resolve_device(s.device)
    data = load_trajectory(s.data)
    molecule = data.molecule()  # refuses frames of another molecule before any work
    resolve_temperature(data.settings.get("temperature"), s.temperature, s.data)  # refuse before any work
    n_test = int(round(data.n_frames * s.test_fraction))
    if n_test < 1:
        raise InputError(f"--test-fraction {s.test_fraction} leaves no test frames out of {data.n_frames}")
    n_train = data.n_frames - n_test
    if n_train < s.batch:
        raise InputError(f"{s.data} has {n_train} training frames, fewer than one batch of {s.batch}")
    if s.init:
        check_init(s.init, record)
    if s.augment and not rotor_hydrogens(molecule):
        raise InputError(f"--augment: {molecule.name} has no interchangeable hydrogen triples to relabel")
    run.prepare(record, overwrite, changed=changed_settings)
    return Trainer(s, run, data, molecule)


def finish_training(trainer: Trainer, summary: dict[str, Any]) -> None:
    """Draw training.png/.pdf and write complete.json (last: its presence marks the run complete)."""
    from bgp4.analysis.plots import training_curves

    run = trainer.run
    training_curves(
        [
            {
                **r,
                "step": r["global_step"],
                "energy": r.get("energy_kT"),
                "p4inv_residual": r.get("p4inv_last_residual"),
            }
            for r in run.records()
        ],
        run.file("training"),
    )
    run.write_json(COMPLETE, summary)
