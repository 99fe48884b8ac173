"""The settings records of training, sampling and refinement, and their checks.

Each stage's settings are one dataclass (`TrainSettings`, `SampleSettings`, `RefineSettings`);
`bgp4.config` fills them from defaults, a config file and flags, and `validated()` checks them.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bgp4.errors import InputError, refuse_non_finite
from bgp4.kinds import DEFAULT_OBJECTIVE, KINDS, OBJECTIVE_KINDS, get_kind, get_objective, kind_names
from bgp4.stage import changed, with_fingerprint

__all__ = [
    "MODELS",
    "SPLINE_MODELS",
    "COMPILE_MODES",
    "LR_SCHEDULES",
    "ZMATRICES",
    "OBJECTIVES",
    "ENERGY_LR",
    "NO_DATA",
    "EXECUTION_ONLY",
    "SCRATCH_SETTINGS",
    "KIND_DEFAULTS",
    "resolve_architecture",
    "TrainSettings",
    "SampleSettings",
    "RefineSettings",
    "RESULT_NEUTRAL",
    "settings_record",
    "changed_settings",
    "check_refine",
    "check_schedule",
]

#: Generator kinds: the paper's two and the circular spline flows (the registry in bgp4.kinds).
MODELS = kind_names()
SPLINE_MODELS = tuple(k.name for k in KINDS.values() if k.circular)
COMPILE_MODES = ("auto", "on", "off")
LR_SCHEDULES = ("auto", "constant", "cosine")
#: The energy phase's learning-rate schedules: constant, or cosine decay to 1 % over its steps.
ENERGY_LR_SCHEDULES = ("constant", "cosine")
# hand: the molecule's own z-matrix (alanine dipeptide: the hand-written one of the paper's setup);
# auto: bgp4.simulation.zmatrix's, built from the bond graph
ZMATRICES = ("hand", "auto")
#: What the second (energy) phase trains: ml (none: likelihood only), mixed (the paper's w_l NLL +
#: w_e reverse KL), kl (reverse KL alone, no data), fab (flow annealed importance sampling bootstrap).
OBJECTIVES = tuple(OBJECTIVE_KINDS)
#: The energy phase's learning rate of each objective when energy_lr is 0 (mixed: the paper's).
ENERGY_LR = {o.name: o.energy_lr for o in OBJECTIVE_KINDS.values() if o.energy_lr is not None}
#: Objectives that train without MD frames (the energy phase alone, without data: from --init or
#: from the molecule's structure).
_DATA_FREE = tuple(o.name for o in OBJECTIVE_KINDS.values() if o.data_free)
#: The `data` values that mean: no MD data (kl and fab from a finished run or from scratch).
NO_DATA = ("", "none")
#: Settings that name the molecule and system of a run from scratch without MD data (`--molecule`).
SCRATCH_SETTINGS = ("molecule", "pdb", "forcefield", "solvent", "constraints")
#: Settings without a command-line option (a config file or the API sets them).
_NO_FLAG = ("checkpoint_minutes",)


def _named(name: str) -> str:
    """A setting as error messages name it: the keyword (for API users), then its option in parentheses."""
    return name if name in _NO_FLAG else f"{name} (--{name.replace('_', '-')})"


#: blocks, hidden width and spline bins of each kind when a setting is 0 (paper kinds: appendix F).
KIND_DEFAULTS: dict[str, dict[str, int]] = {name: kind.defaults for name, kind in KINDS.items()}


def resolve_architecture(kind: str, blocks: int = 0, hidden: int = 0, bins: int = 0) -> dict[str, int]:
    """{blocks, hidden[, bins]} with zeros replaced by the kind's defaults."""
    return get_kind(kind).architecture(blocks, hidden, bins)


@dataclass(frozen=True)
class TrainSettings:
    """Everything that defines a training run; the defaults are the paper's (REFERENCE section 4)."""

    data: str = "data/ala2-600K.h5"
    model: str = "p4inv"
    steps: int = 40_000
    batch: int = 256
    lr: float = 1e-3
    energy_steps: int = 2_000
    energy_lr: float = 0.0  # 0: the objective's (ENERGY_LR: mixed 1e-5 as in the paper, kl and fab 1e-4)
    energy_lr_schedule: str = "constant"  # constant | cosine (decay to 1 % over the energy phase)
    energy_weight: float = 0.05  # w_e / w_l (mixed)
    objective: str = DEFAULT_OBJECTIVE  # ml | mixed | kl | fab: what the energy phase trains (OBJECTIVES)
    fab_levels: int = 8  # FAB: intermediate distributions of each AIS run towards p^2/q
    fab_moves: int = 1  # FAB: HMC moves per level (MALA with fab_leapfrog 1)
    fab_leapfrog: int = 1  # FAB: leapfrog steps per HMC move; 1: MALA (fab-torch's HMC takes several)
    fab_independence: int = 1  # FAB: independence Metropolis moves per level (before the HMC moves)
    fab_buffer: int = 50_000  # FAB: replay buffer capacity (samples)
    fab_reuse: int = 4  # FAB: gradient steps per AIS batch drawn into the buffer
    fab_power: float = 2.0  # FAB: AIS schedule b_k = (k / (K + 1))^power; 1: evenly spaced, as fab-torch
    blocks: int = 0  # 0: the kind's default (paper kinds 25, spline kinds 6)
    hidden: int = 0  # 0: the kind's default (paper kinds 60, spline kinds 256)
    bins: int = 0  # spline bins; 0: the kind's default (8)
    lr_schedule: str = "auto"  # auto: constant for the paper's kinds, cosine decay for spline kinds
    clip_grad: float = -1.0  # max gradient norm; 0: no clipping; -1: auto (10 for spline kinds, kl and fab; else none)
    weight_decay: float = 0.0  # likelihood phase: AdamW's decoupled decay of the coupling nets' weight matrices
    penalty_weight: float = 0.0  # C_p of the P4Inv bound penalty; 0 as in the paper's BG experiment
    merge_every: int = 100
    force_every: int = 10
    correct_every: int = 50
    test_fraction: float = 0.1
    eval_every: int = 1_000
    keep_best: bool = False  # end the likelihood phase with its weights of lowest test NLL (of the evaluations)
    fix_constrained: bool = True  # every constrained bond held fixed (48 dims); False: the paper's 60
    zmatrix: str = "hand"  # hand: the molecule's own z-matrix; auto: the automatic one from the bond graph
    device: str = "auto"
    seed: int = 0
    workers: int = 0  # energy-bridge processes; 0: one per core
    checkpoint_minutes: float = 5.0
    compile: str = "auto"  # torch.compile the likelihood step: auto|on|off (auto: long CPU runs)
    temperature: float | None = None  # K: of data files that record none; of runs without data (from scratch: needed)
    init: str | None = None  # a finished run to start from (same architecture, z-matrix and split settings)
    augment: bool = False  # relabel interchangeable hydrogens (methyl groups) of training frames at random
    # without data and init (a run from scratch): the molecule and system; "" takes the system's defaults
    molecule: str = ""  # a registered name or sequence:SEQ (bgp4.simulation.molecule)
    pdb: str = ""  # a structure file instead of a named molecule
    forcefield: str = ""  # "": amber99sb-ildn (bgp4.simulation.system.SystemSpec)
    solvent: str = ""  # "": obc
    constraints: str = ""  # "": hbonds

    @property
    def has_data(self) -> bool:
        """Whether the run has MD data (`data` is not one of NO_DATA)."""
        return self.data.strip().lower() not in NO_DATA

    def validated(self) -> TrainSettings:
        """A copy with paths made absolute and every auto value resolved; raises InputError for
        impossible values."""
        kind = get_kind(self.model, what="model")
        refuse_non_finite(self, _named)
        for name in ("steps", "energy_steps", "workers", "seed"):
            if getattr(self, name) < 0:
                raise InputError(f"{_named(name)} must be >= 0, got {getattr(self, name)}")
        for name in ("batch", "merge_every", "force_every", "correct_every", "eval_every"):
            if getattr(self, name) < 1:
                raise InputError(f"{_named(name)} must be >= 1, got {getattr(self, name)}")
        if not self.penalty_weight >= 0:
            raise InputError(f"penalty_weight (--penalty-weight) must be >= 0, got {self.penalty_weight}")
        for name in ("lr", "checkpoint_minutes"):
            if not getattr(self, name) > 0:
                raise InputError(f"{_named(name)} must be positive, got {getattr(self, name)}")
        if self.temperature is not None and not self.temperature > 0:
            raise InputError(f"temperature (--temperature) must be positive (K), got {self.temperature}")
        if not 0.0 < self.test_fraction < 1.0:
            raise InputError(f"test_fraction (--test-fraction) must be in (0, 1), got {self.test_fraction}")
        if self.compile not in COMPILE_MODES:
            raise InputError(f"compile (--compile) must be one of {', '.join(COMPILE_MODES)}, got {self.compile!r}")
        if self.zmatrix not in ZMATRICES:
            raise InputError(f"zmatrix (--zmatrix) must be one of {', '.join(ZMATRICES)}, got {self.zmatrix!r}")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise InputError(f"unknown device {self.device!r}; choose auto, cpu, cuda or cuda:N")
        for name in ("blocks", "hidden", "bins"):
            if getattr(self, name) < 0:
                raise InputError(f"{_named(name)} must be >= 0 (0: the kind's default), got {getattr(self, name)}")
        if self.bins and not 2 <= self.bins <= 64:
            raise InputError(f"bins (--bins) must be in 2..64, got {self.bins}")
        if self.bins and not kind.bins:
            raise InputError(f"bins (--bins) applies to the spline kinds only, not {self.model}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise InputError(
                f"lr_schedule (--lr-schedule) must be one of {', '.join(LR_SCHEDULES)}, got {self.lr_schedule!r}"
            )
        if not 0.0 <= self.weight_decay * self.lr < 1.0:  # each step multiplies a matrix by 1 - lr * decay
            raise InputError(
                f"weight_decay (--weight-decay) must be in [0, 1 / lr) = [0, {1.0 / self.lr:g}), "
                f"got {self.weight_decay}"
            )
        if self.clip_grad < 0 and self.clip_grad != -1:
            raise InputError(f"clip_grad (--clip-grad) must be >= 0 (or -1 for auto), got {self.clip_grad}")
        self._check_objective()
        # spline couplings train with a cosine schedule and clipped gradients; kl and fab clip too
        spline, energy_only = kind.circular, self.objective in _DATA_FREE
        arch = kind.architecture(self.blocks, self.hidden, self.bins)
        return dataclasses.replace(
            self,
            data=str(Path(self.data).expanduser().resolve()) if self.has_data else "",
            init=str(Path(self.init).expanduser().resolve()) if self.init else None,
            pdb=str(Path(self.pdb).expanduser().resolve()) if self.pdb else "",
            blocks=arch["blocks"],
            hidden=arch["hidden"],
            bins=arch.get("bins", 0),
            lr_schedule=self.lr_schedule if self.lr_schedule != "auto" else ("cosine" if spline else "constant"),
            clip_grad=self.clip_grad if self.clip_grad >= 0 else (10.0 if spline or energy_only else 0.0),
            energy_steps=0 if self.objective == "ml" else self.energy_steps,
            weight_decay=self.weight_decay if self.steps else 0.0,  # only the likelihood phase decays
            energy_lr=self.energy_lr or ENERGY_LR.get(self.objective, ENERGY_LR[DEFAULT_OBJECTIVE]),
        )

    def _check_objective(self) -> None:
        """Refuse (InputError) an unknown objective, its settings out of range, and a run without
        MD data that would need them."""
        get_objective(self.objective)  # InputError for an unknown one
        if not self.energy_lr >= 0:
            raise InputError(f"energy_lr (--energy-lr) must be positive (0: the objective's), got {self.energy_lr}")
        if self.energy_lr_schedule not in ENERGY_LR_SCHEDULES:
            raise InputError(
                "energy_lr_schedule (--energy-lr-schedule) must be one of "
                f"{', '.join(ENERGY_LR_SCHEDULES)}, got {self.energy_lr_schedule!r}"
            )
        if not self.energy_weight >= 0:
            raise InputError(f"energy_weight (--energy-weight) must be >= 0, got {self.energy_weight}")
        for name, low, high in _FAB_RANGES:
            value = getattr(self, name)
            if not low <= value <= high:
                raise InputError(f"{_named(name)} must be in {low}..{high}, got {value}")
        check_schedule(self.fab_levels, self.fab_power, "fab_power (--fab-power)", "fab_levels (--fab-levels)")
        if self.fab_levels and self.fab_moves + self.fab_independence < 1:
            raise InputError(
                "fab_moves (--fab-moves) and fab_independence (--fab-independence) are both 0: the AIS levels "
                "would not move"
            )
        if self.objective == "fab" and self.fab_buffer < self.batch:
            raise InputError(f"fab_buffer (--fab-buffer) {self.fab_buffer} holds less than one batch of {self.batch}")
        given = [name for name in SCRATCH_SETTINGS if getattr(self, name)]
        if given and (self.has_data or self.init):
            source = "the data file (--data)" if self.has_data else "the model of init (--init)"
            raise InputError(
                f"{_named(given[0])} is for a run from scratch without MD data (--data none, no --init): "
                f"{source} names this run's molecule and system"
            )
        if self.has_data:
            return
        what = f"objective {self.objective} (--objective)"
        if self.objective not in _DATA_FREE:
            raise InputError(f"{what} trains on MD data: give data (--data); only kl and fab train without")
        if self.steps:
            raise InputError(f"steps (--steps) {self.steps}: likelihood steps need MD data (--data); pass --steps 0")
        if self.init:
            return
        if not self.molecule and not self.pdb:
            raise InputError(
                f"{what} without MD data (--data none) needs the molecule (--molecule NAME or --pdb FILE, with "
                "--temperature) or a finished run to start from (--init RUN), whose model carries the molecule"
            )
        if self.molecule and self.pdb:
            raise InputError("give molecule (--molecule) or pdb (--pdb), not both")
        if self.temperature is None:
            raise InputError(
                "temperature (--temperature) is needed for a run from the molecule without MD data: the K of "
                "the Boltzmann distribution it learns"
            )


#: FAB settings: (name, lowest, highest).
_FAB_RANGES = (
    ("fab_levels", 0, 1_000),
    ("fab_moves", 0, 100),
    ("fab_leapfrog", 1, 100),
    ("fab_independence", 0, 100),
    ("fab_buffer", 1, 10_000_000),
    ("fab_reuse", 1, 1_000),
)


@dataclass(frozen=True)
class SampleSettings:
    """How many samples, in which batches, on which device, from which seed."""

    n: int = 100_000
    batch: int = 10_000
    device: str = "auto"
    seed: int = 0
    workers: int = 0  # energy-bridge processes; 0: one per core

    def validated(self) -> SampleSettings:
        if self.n < 1:
            raise InputError(f"n (--n) must be at least 1, got {self.n}")
        if self.batch < 1:
            raise InputError(f"batch (--batch) must be at least 1, got {self.batch}")
        if self.workers < 0:
            raise InputError(f"workers (--workers) must be >= 0, got {self.workers}")
        if self.seed < 0:
            raise InputError(f"seed (--seed) must be >= 0, got {self.seed}")
        return self


@dataclass(frozen=True)
class RefineSettings:
    """AIS refinement: levels K, independence and HMC moves per level, leapfrog steps per HMC move
    (1: MALA), SMC threshold."""

    levels: int = 0
    steps: int = 1  # HMC moves per level (after the independence moves)
    leapfrog: int = 1
    independence: int = 1  # independence Metropolis moves per level, before the HMC moves
    resample_ess: float = 0.0  # 0: plain AIS
    power: float = 2.0  # schedule b_k = (k / (K + 1))^power
    pilot: int = 1_000  # samples of the step-size pilot (discarded)

    def validated(self) -> RefineSettings:
        check_refine(self.levels, self.steps, self.leapfrog, self.resample_ess, self.independence, self.power)
        if self.pilot < 10:
            raise InputError(f"the step-size pilot needs at least 10 samples, got {self.pilot}")
        return self


#: Settings that say how a run is executed, not what it computes: a resumed run or sweep may change
#: them, and the run goes on with the new values.
EXECUTION_ONLY = ("workers", "checkpoint_minutes")
#: Settings that do not change what a run computes: a run resumes, or is complete, whatever they are.
#: The data file counts by content (`data_fingerprint`), so a moved or copied file is the same data.
RESULT_NEUTRAL = ("data", *EXECUTION_ONLY)


def settings_record(s: TrainSettings) -> dict[str, Any]:
    """The run's settings as stored in settings.json, with the data file's fingerprint."""
    import json

    return with_fingerprint(json.loads(json.dumps(dataclasses.asdict(s))))


def changed_settings(previous: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Names of the settings that differ between two training records in a way that changes the
    result (`bgp4.stage.changed`): the data file by content where both records have its
    fingerprint, else by path; a setting one record lacks (a run of an older version) counts as
    its default."""
    return changed(previous, current, neutral=RESULT_NEUTRAL, defaults=dataclasses.asdict(TrainSettings()))


def check_schedule(
    levels: int, power: float, power_name: str = "schedule power", levels_name: str = "levels (--refine)"
) -> None:
    """Refuse (InputError) an AIS schedule b_k = (k / (K + 1))^power that cannot be built; the
    messages call the settings `levels_name` and `power_name`."""
    if not isinstance(levels, numbers.Integral) or levels < 0:
        raise InputError(f"{levels_name} must be a non-negative integer, got {levels!r}")
    if not (isinstance(power, numbers.Real) and 0.0 < power <= 10.0):
        raise InputError(f"{power_name} must be in (0, 10], got {power!r}")


def check_refine(
    levels: int, steps: int, leapfrog: int, resample_ess: float, independence: int, power: float = 2.0
) -> None:
    """Refuse (InputError) AIS settings that cannot run; messages name the keyword and its CLI flag."""
    check_schedule(levels, power)
    if not isinstance(steps, numbers.Integral) or steps < 0:
        raise InputError(f"steps (--refine-steps) must be a non-negative integer, got {steps!r}")
    if not isinstance(leapfrog, numbers.Integral) or leapfrog < 1:
        raise InputError(f"leapfrog (--refine-leapfrog) must be at least 1, got {leapfrog!r}")
    if not 0.0 <= resample_ess <= 1.0:
        raise InputError(f"resample_ess (--resample-ess) must be in [0, 1], got {resample_ess}")
    if not isinstance(independence, numbers.Integral) or independence < 0:
        raise InputError(f"independence (--refine-independence) must be a non-negative integer, got {independence!r}")
    if steps + independence < 1:
        raise InputError(
            "steps (--refine-steps) and independence (--refine-independence) are both 0: the levels would not move"
        )
