"""Training a Boltzmann generator: maximum likelihood, then an energy phase with the run's
objective (the paper's mixed loss, reverse KL or FAB: `bgp4.generator.objectives`).

`train` trains (or resumes, or finds complete) the run in a directory. A `Trainer` composes the
parts of one run, each with one job: `TrainingData` (the split, flow coordinates and batches),
`TrainingLoop` (optimizer, P4Inv schedule, learning rate, steps and metrics; the phases are
described there) and `Checkpoint` (every piece of state in one file, so that a resumed run equals
an unbroken one). The Trainer itself holds the OpenMM energy of the energy phase (worker
processes) and writes the run's summary. A run without MD data (kl or fab with `data` none)
starts from the model of a finished run (`init`), which carries the molecule and the coordinate
transform, or from scratch: from the molecule the settings name (`molecule` or `pdb`, in the system
of `forcefield`, `solvent` and `constraints`), whose coordinate transform is fitted to its
minimized structure with force-field widths at the run's temperature
(`bgp4.flows.structure_fit`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bgp4._rng import PrivateRNG
from bgp4._stop import StopRequest
from bgp4.analysis.plots_training import training_curves
from bgp4.errors import InputError
from bgp4.generator.checkpoint import Checkpoint
from bgp4.generator.loop import LOG_EVERY, TrainingLoop
from bgp4.generator.losses import energy_phase_loss, grad_norm, likelihood_loss, p4inv_penalty
from bgp4.generator.model import BoltzmannGenerator, build_generator, load_generator, weights_defined
from bgp4.generator.rundir import MODEL, RunDirectory, check_init, check_init_molecule, init_summary, run_costs
from bgp4.generator.training_data import TEST_FRAMES, TrainingData, check_frame_count
from bgp4.kinds import get_objective
from bgp4.platform import resolve_device
from bgp4.settings import TrainSettings, changed_settings, settings_record
from bgp4.simulation.atoms import rotor_hydrogens
from bgp4.simulation.data import TrajectoryData, load_trajectory, resolve_temperature
from bgp4.simulation.energy import OpenMMEnergy
from bgp4.simulation.molecule import Molecule, get_molecule, molecule_name, pdb_molecule
from bgp4.simulation.system import SystemSpec
from bgp4.stage import refuse_changes

__all__ = [
    "LOG_EVERY",
    "TEST_FRAMES",
    "TrainSettings",
    "Trainer",
    "energy_phase_loss",
    "finish_training",
    "grad_norm",
    "likelihood_loss",
    "p4inv_penalty",
    "prepare_training",
    "train",
]


class Trainer:
    """One run: its data, generator, training loop and checkpoint, and the OpenMM energy of its
    energy phase.

    With a `summary`: a Trainer of a complete run (what `prepare_training` returns for one);
    nothing is built, `complete` is true and `fit` returns the summary. A Trainer becomes complete
    when `fit` takes the last step. `data` None without a summary: a run without MD data, whose
    generator starts as the model of `settings.init`, or (no init) is built for `molecule` with a
    transform fitted to its structure (validated settings ensure one of the two).

    Attributes: s (the validated settings), run, molecule, device, temperature (K), rng (the
    private stream of torch's global generators), bg (the generator), data (`TrainingData`),
    loop (`TrainingLoop`), checkpoint (`Checkpoint`), summary (None until complete).
    """

    def __init__(
        self,
        settings: TrainSettings,
        run: RunDirectory,
        data: TrajectoryData | None,
        molecule=None,
        *,
        summary: dict[str, Any] | None = None,
    ):
        self.s, self.run, self.summary = settings, run, summary
        self._openmm = None  # OpenMMEnergy of the energy phase, opened when first needed
        if summary is not None:
            return
        if data is None and not settings.init and molecule is None:
            raise ValueError(
                "a Trainer needs training data, a run or a molecule to start from, or the summary of a complete run"
            )
        self.device = resolve_device(settings.device)
        # initialization and P4Inv's redraws of v use torch's global generators: give them a
        # private stream, so the caller's generators stay untouched and a resume stays exact
        self.rng = PrivateRNG(settings.seed, self.device)
        if data is None:
            self._without_data(molecule)
        else:
            self._with_data(data, molecule)
        self.loop = TrainingLoop(settings, self.bg, self.data, run, self.rng, self.device)
        self.checkpoint = Checkpoint(run, self.bg, self.rng, self.data, self.loop, self.device)

    def _without_data(self, molecule) -> None:
        """The generator, molecule and temperature of `init`'s run (the temperature setting wins);
        without init, a fresh generator of `molecule` fitted to its structure at the temperature setting."""
        self.data = None
        if not self.s.init:
            self.molecule, self.temperature = molecule, float(self.s.temperature)
            self.bg = self._build(None)
            return
        self.bg = self._init_model()
        self.molecule = molecule if molecule is not None else self.bg.molecule()
        self.temperature = float(self.s.temperature or init_summary(self.s.init)["temperature"])

    def _with_data(self, data: TrajectoryData, molecule) -> None:
        """Split and map the MD frames; a generator whose transform is fitted to the training frames."""
        settings = self.s
        self.molecule = molecule if molecule is not None else data.molecule()
        self.data = TrainingData(data.xyz, settings, self.molecule)
        self.run.save_split(self.data.train_idx, self.data.test_idx)
        self.temperature = resolve_temperature(data.settings.get("temperature"), settings.temperature, settings.data)
        self.bg = self._build(self.data.train_frames)  # with init too: it draws the seeded stream alike
        if settings.init:  # init's model keeps its own transform: its fit, and so its circular torsions
            self.bg = self._init_model()
        self.data.map(self.bg)

    def _init_model(self) -> BoltzmannGenerator:
        """The model of `init`'s run, on the run's device."""
        return load_generator(RunDirectory(self.s.init).file(MODEL), self.device)

    def _build(self, frames):
        """A fresh generator of the run's kind, its transform fitted to `frames` (n, n_atoms, 3) nm or,
        for None, to the molecule's structure at the run's temperature."""
        s = self.s
        with self.rng:
            return build_generator(
                s.model,
                frames,
                self.molecule,
                blocks=s.blocks,
                hidden=s.hidden,
                fix_constrained=s.fix_constrained,
                bins=s.bins,
                zmatrix=s.zmatrix,
                temperature=self.temperature if frames is None else None,
            ).to(self.device)

    @property
    def complete(self) -> bool:
        """Whether the run is trained to its last step (its summary is `summary`)."""
        return self.summary is not None

    @property
    def step(self) -> int:
        """Global steps taken."""
        return self.loop.step if self.summary is None else int(self.summary["steps"])

    @property
    def total_steps(self) -> int:
        return self.s.steps + self.s.energy_steps

    # -- the loop ------------------------------------------------------------------------
    def fit(
        self, progress: bool = True, stop: Callable[[], bool] | None = None, until: int | None = None
    ) -> dict[str, Any] | None:
        """Train to the last step (resuming from the checkpoint), save model.pt; returns the summary
        that `train` writes to complete.json. Ctrl-C, SIGTERM or `stop()` turning true save a
        checkpoint at the next step boundary and raise KeyboardInterrupt.

        `until`: train only to that global step, save a checkpoint there and return None: one part
        of the run (a sweep hands out runs in parts). The OpenMM workers then stay open for the next
        part; `close()` ends them. A complete Trainer returns its summary at once.
        """
        from tqdm.auto import tqdm

        if self.complete:
            return self.summary
        self._start()
        end = self.total_steps if until is None else min(until, self.total_steps)
        self.loop.compile(progress)
        energy = self._energy() if end > self.s.steps else None
        bar = tqdm(total=self.total_steps, initial=self.step, desc=self.loop.phase, disable=not progress, unit="step")
        request = StopRequest(also=stop)
        self.checkpoint.moved_on()  # the state moves on from the checkpoint with the first step
        try:
            self._train_to(end, energy, bar, request)
        except BaseException:
            self.checkpoint.moved_on()  # it may have trained on after its last checkpoint
            self.close()
            raise
        finally:
            request.restore()
            bar.close()
        if until is None or self.step >= self.total_steps:
            self.close()
        return self._finish() if self.step >= self.total_steps else None

    def _start(self) -> None:
        """Resume from the checkpoint, or start with a first metrics record."""
        if self.checkpoint.restore():
            if self.data is not None:  # a checkpoint's transform rules; an older bgp4 may have fitted it otherwise
                self.data.remap_if_refitted()
            return
        self.run.truncate_log(-1)  # records of a run killed before its first checkpoint
        self.loop.record([], test=True)

    def _train_to(self, end: int, energy, bar, request: StopRequest) -> None:
        """Steps up to global step `end`, with checkpoints at phase ends, at `end`, every
        checkpoint_minutes and when a stop is requested (then KeyboardInterrupt)."""
        loop, last_save = self.loop, time.monotonic()
        while loop.step < end:
            record = loop.advance(energy)
            if record is not None:
                shown = ("train_nll", "test_nll", "energy_kT", "batch_ess", "flow_ess")
                bar.set_postfix({k: f"{record[k]:.3g}" for k in shown if record.get(k) is not None})
            if loop.step == self.s.steps and self.s.energy_steps:
                bar.set_description("energy")
            if loop.at_phase_end or loop.step == end or time.monotonic() - last_save > 60 * self.s.checkpoint_minutes:
                self.checkpoint.save()
                last_save = time.monotonic()
            bar.update(1)
            if request.requested:  # Ctrl-C, SIGTERM or stop(): save at a step boundary, then stop
                self.checkpoint.save()
                raise KeyboardInterrupt

    # -- OpenMM and the summary ----------------------------------------------------------
    def _energy(self):
        """The OpenMM energy of the energy phase (worker processes, kept open between parts)."""
        if self._openmm is None:
            self._openmm = OpenMMEnergy(self.molecule.system, self.temperature, n_workers=self.s.workers or None)
        return self._openmm

    def close(self) -> None:
        """Stop the OpenMM worker processes, if any are open."""
        if self._openmm is not None:
            self._openmm.close()
            self._openmm = None

    def _finish(self) -> dict[str, Any]:
        """Save model.pt; the run's summary (and the Trainer is complete)."""
        self.bg.save(self.run.file(MODEL))
        tests = [r["test_nll"] for r in self.run.records() if r.get("test_nll") is not None]
        loop = self.loop
        self.summary = {
            "steps": self.total_steps,
            "skipped_steps": loop.skipped,
            "wall_s": round(loop.wall, 1),
            "test_nll_start": tests[0] if tests else None,
            "test_nll_end": tests[-1] if tests else None,
            **self._kept(),
            "temperature": self.temperature,
            "device": str(self.device),
            "compiled": loop.compiled,
            "objective": self.s.objective,
            **self._costs(),
            "n_dims": self.bg.n_dims,
            "molecule": self.molecule.name,
            "parameters": sum(p.numel() for p in self.bg.parameters() if p.requires_grad),
            **weights_defined(self.bg, self.molecule),
            **loop.p4inv_stats(),
        }
        return self.summary

    def _kept(self) -> dict[str, Any]:
        """keep_best: the likelihood step whose weights ended that phase, and their test NLL (then
        also test_nll_end, when no energy phase follows). The P4Inv statistics still count every
        step of the phase, those after the kept step included."""
        best = self.loop.best
        if best is None:
            return {}
        kept = {"kept_step": best["step"], "kept_test_nll": best["test_nll"]}
        return kept if self.s.energy_steps else {**kept, "test_nll_end": best["test_nll"]}

    def _costs(self) -> dict[str, int]:
        """Target energy evaluations and MD frames of this run, and in total with the runs it
        started from (`init`, followed back): what the field compares methods at. A run from
        another with MD data uses the same frames (`check_init`): frames count once."""
        evaluations, frames = self.loop.energy_evaluations, self.loop.md_frames
        before = run_costs(self.s.init) if self.s.init else {}
        return {
            "energy_evaluations": evaluations,
            "md_frames": frames,
            "energy_evaluations_total": evaluations + before.get("energy_evaluations_total", 0),
            "md_frames_total": max(frames, before.get("md_frames_total", 0)),
        }


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
    if trainer.complete:
        return trainer.summary, False
    summary = trainer.fit(progress=progress, stop=stop)
    finish_training(trainer, summary)
    return summary, True


def prepare_training(settings: TrainSettings, out: str | Path, overwrite: bool = False) -> Trainer:
    """Check the settings and data, prepare the run directory `out` and build its Trainer (which
    resumes from the checkpoint when it fits); a complete Trainer holding the summary when the
    run is complete."""
    s = _named_system(settings.validated())
    run = RunDirectory(out)
    record = settings_record(s)
    if run.complete and not overwrite:
        refuse_changes(
            f"{run.path} holds a finished run",
            changed_settings(run.settings(), record),
            "use another out directory (--out) or pass overwrite=True (--overwrite)",
        )
        return Trainer(s, run, None, summary=run.completion())
    resolve_device(s.device)
    data, molecule = _checked_data(s) if s.has_data else (None, None)
    if not s.has_data and not s.init:
        molecule = _scratch_molecule(s)
    system = molecule  # the molecule whose energy the run trains with
    if s.init:
        check_init(s.init, record, data=s.has_data)
        system = check_init_molecule(s.init, molecule)
    if s.augment and (data is None or not rotor_hydrogens(molecule)):
        why = "no MD data to relabel" if data is None else f"{molecule.name} has no interchangeable hydrogen triples"
        raise InputError(f"augment=True (--augment): {why}")
    if get_objective(s.objective).data_free and not s.fix_constrained and system.system.getNumConstraints():
        raise InputError(
            f"objective {s.objective} (--objective) with fix_constrained=False (--no-fix-constrained): the flow "
            "models the constrained bonds, along which p/q is unbounded; train with --fix-constrained"
        )
    run.prepare(record, overwrite, changed=changed_settings)
    return Trainer(s, run, data, molecule)


def _named_system(s: TrainSettings) -> TrainSettings:
    """Validated settings of a run from scratch with its molecule's registered name and every
    system setting spelled out (so that the record says what was used); others unchanged."""
    if s.has_data or s.init:
        return s
    spec = SystemSpec(**{k: getattr(s, k) for k in ("forcefield", "solvent", "constraints") if getattr(s, k)})
    named = {k: getattr(spec, k) for k in ("forcefield", "solvent", "constraints")}
    return dataclasses.replace(s, molecule=molecule_name(s.molecule) if s.molecule else "", **named)


def _scratch_molecule(s: TrainSettings) -> Molecule:
    """The molecule of a run from scratch (settings from `_named_system`): the named one or the
    structure file's (hydrogens added, minimized), in the system the settings name."""
    spec = SystemSpec(s.forcefield, s.solvent, s.constraints)
    if s.pdb:
        if not Path(s.pdb).is_file():
            raise InputError(f"no structure file at {s.pdb} (--pdb)")
        return pdb_molecule(s.pdb, spec)
    return get_molecule(s.molecule, spec)


def _checked_data(s: TrainSettings) -> tuple[TrajectoryData, Any]:
    """The MD data of validated settings and its molecule; InputError (before any work) for a
    file of another molecule, a temperature that contradicts it, or too few frames."""
    data = load_trajectory(s.data)
    molecule = data.molecule()  # refuses frames of another molecule before any work
    resolve_temperature(data.settings.get("temperature"), s.temperature, s.data)  # refuse before any work
    check_frame_count(data.n_frames, s, str(s.data))
    return data, molecule


def finish_training(trainer: Trainer, summary: dict[str, Any]) -> None:
    """Draw training.png/.pdf and write complete.json (last: its presence marks the run complete)."""
    run = trainer.run
    # the ESS of the flow's own samples draws the sampling panels: fab logs it, kl as its batch
    # ESS; mixed logs a batch ESS too, but its figure keeps the panels it always had
    flow_ess = get_objective(trainer.s.objective).flow_ess_key
    training_curves(
        [
            {
                **r,
                "step": r["global_step"],
                "energy": r.get("energy_kT"),
                "p4inv_residual": r.get("p4inv_last_residual"),
                "flow_ess": r.get(flow_ess),
            }
            for r in run.records()
        ],
        run.file("training"),
    )
    run.finish(summary)
