"""`bgp4 pipeline` (every stage, one preset) and `bgp4 sweep` (every model and seed on Dask distributed)."""

from __future__ import annotations

import copy
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Optional

import typer

from bgp4._io import exclusive
from bgp4.cli._app import default_of, handles_errors
from bgp4.cli.md import FORCEFIELD_HELP, MOLECULE_HELP, PDB_HELP, SEQUENCE_HELP, molecule_choice
from bgp4.cli.training import train
from bgp4.config import merge_settings, read_config_file
from bgp4.errors import InputError
from bgp4.pipeline import NO_PRESET, get_preset, preset_train_settings, run_pipeline
from bgp4.settings import (
    SCRATCH_SETTINGS,
    RefineSettings,
    SampleSettings,
    TrainSettings,
)
from bgp4.simulation.md import MDSettings

__all__ = ["pipeline", "sweep"]

_SAMPLE = SampleSettings


@handles_errors
def pipeline(
    preset: str = typer.Option(
        "quick",
        help="quick (minutes on 2 cores: 100,000 MD frames; rnvp, p4inv and spline, the spline refined by AIS) or "
        "paper (the full reproduction: 500,000 frames; rnvp, p4inv, spline and spline-p4inv).",
    ),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Directory for data, runs and report. [default: out/<preset>]"
    ),
    seed: int = typer.Option(0, help="Seed of every stage."),
    device: str = typer.Option("auto", help="auto|cpu|cuda for training and sampling."),
    molecule: str = typer.Option("", help=MOLECULE_HELP),
    sequence: str = typer.Option("", "--sequence", help=SEQUENCE_HELP),
    pdb: str = typer.Option("", "--pdb", help=PDB_HELP),
    forcefield: str = typer.Option(default_of(MDSettings, "forcefield"), help=FORCEFIELD_HELP),
    solvent: str = typer.Option(default_of(MDSettings, "solvent"), help="Solvent: obc (implicit water) or vacuum."),
    constraints: str = typer.Option(
        default_of(MDSettings, "constraints"), help="hbonds (X-H bonds fixed, in the flows too) or none."
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """Simulate, train the preset's generators, sample (refining by AIS where the preset says so) and analyze,
    into out/<preset>/ (data/, runs/<model>/, report/); completed stages are skipped on rerun. Alanine
    dipeptide unless another molecule is given."""
    md = {
        "molecule": molecule_choice(molecule, sequence, pdb),
        "pdb": pdb,
        "forcefield": forcefield,
        "solvent": solvent,
        "constraints": constraints,
    }
    out = out if out is not None else Path("out") / preset
    with exclusive(out):
        run_pipeline(preset, out, seed=seed, device=device, progress=not quiet, say=typer.echo, md=md)


# `bgp4 sweep` takes every `bgp4 train` setting with train's own option (name, help, default);
# these train parameters are not settings, or the sweep has its own meaning for them; the
# from-scratch ones need `--data none`, which a sweep never has (its data file is simulated first)
_NOT_SWEEP_SETTINGS = {"out", "overwrite", "quiet", "data", "model", "seed", "workers"}
# train's options whose meaning differs in a sweep: the sweep's own help text
_SWEEP_HELP = {
    "device": "auto|cpu|cuda|cuda:N. auto is cpu unless --gpus-per-run > 0 (the resource request decides, not the "
    "device a worker happens to see). [default: auto]",
    "init": "A finished sweep: each run starts from that sweep's run of the same model and seed (e.g. FAB "
    "after a likelihood sweep).",
    "temperature": "Temperature in K of a data file that records none (a plain mdtraj file).",
    "config": "TOML or YAML file of `bgp4 train` settings for every run (not the sweep's own options, nor data, "
    "model, seed or workers, which the sweep sets); flags win.",
}


def _sweep_option(name: str, option: typer.models.OptionInfo) -> typer.models.OptionInfo:
    """Train's option `name`, with the sweep's own help text where its meaning differs."""
    if name not in _SWEEP_HELP:
        return option
    own = copy.copy(option)
    own.help = _SWEEP_HELP[name]
    return own


def _with_train_settings(command: Callable) -> Callable:
    """Append train's setting options to `command`'s signature; they arrive in its **settings."""
    own = [p for p in inspect.signature(command).parameters.values() if p.kind is not p.VAR_KEYWORD]
    hints = typing.get_type_hints(train)  # typer reads types from the annotations, resolved here
    shared = [
        p.replace(annotation=hints[name], default=_sweep_option(name, p.default))
        for name, p in inspect.signature(train).parameters.items()
        if name not in _NOT_SWEEP_SETTINGS | set(SCRATCH_SETTINGS)
    ]
    command.__signature__ = inspect.Signature(own + shared)
    command.__annotations__.update({p.name: p.annotation for p in shared})
    return command


# `sweep` runs past 60 lines only in its signature: typer reads each option, with its `--help`
# text and its default (taken from the settings dataclasses), from one parameter.
@handles_errors
@_with_train_settings
def sweep(
    data: Path = typer.Option(
        ...,
        "--data",
        help="MD data file; simulated first if it does not exist, with the preset's MD settings, else `bgp4 "
        "simulate`'s defaults (alanine dipeptide, 600 K, 500,000 frames).",
    ),
    models: str = typer.Option(
        "rnvp,p4inv",
        "--models",
        help="Comma-separated generators; the first is the reference of the paired comparisons.",
    ),
    seeds: int = typer.Option(
        3, "--seeds", help="Seeds per model (0 .. N-1); seed k gives every model the same train/test split."
    ),
    objectives: Optional[str] = typer.Option(
        None,
        "--objectives",
        help=(
            "Comma-separated objectives to compare (ml, mixed, kl, fab): every model trains with each, in "
            "runs/<model>-<objective>-s<seed>, and the report compares <model>-<objective>. [default: "
            "--objective's, one per model]"
        ),
    ),
    out: Path = typer.Option(..., "--out", help="Sweep directory: runs/<model>-s<seed>/, report/."),
    preset: Optional[str] = typer.Option(
        None,
        "--preset",
        help="quick|paper: the train, sample and MD sizes of `bgp4 pipeline` (not its models or refinement); "
        "settings given here win. The [default: ...] of the train settings below hold without --preset.",
    ),
    samples: Optional[int] = typer.Option(
        None, "--samples", help="Samples per run. [default: the preset's, else 100000]"
    ),
    scheduler: Optional[str] = typer.Option(
        None,
        "--scheduler",
        help="Address of a running Dask scheduler (tcp://host:8786); default: a local cluster on this machine.",
    ),
    workers: Optional[int] = typer.Option(
        None,
        "--workers",
        help="Local cluster: Dask worker processes, one task each (a run's OpenMM energy processes: "
        "--threads-per-run); not with --scheduler. [default: cores / threads-per-run, at most the runs to do]",
    ),
    worker_memory: Optional[float] = typer.Option(
        None,
        "--worker-memory",
        help=(
            "Local cluster: GiB a worker may hold before it is restarted (its task resumes in a fresh "
            "one); 0: no limit. [default: 80 % of the memory available at start, shared among the workers, at "
            "least 4 GiB each]"
        ),
    ),
    threads_per_run: int = typer.Option(1, "--threads-per-run", help="Torch threads and energy processes of each run."),
    gpus_per_run: float = typer.Option(
        0.0,
        "--gpus-per-run",
        help=(
            "GPUs per run, as Dask worker resources (with --scheduler, start its workers with --resources GPU=1; "
            "a local cluster sets them itself); 0.5 puts two runs on a GPU."
        ),
    ),
    refine: int = typer.Option(
        0,
        "--refine",
        help=(
            "Also refine every run's samples by annealed importance sampling with K levels, as `bgp4 sample "
            "--refine K`; the report compares '<model> +AIS(K)' beside each model. 0: no refinement."
        ),
    ),
    refine_steps: int = typer.Option(
        default_of(RefineSettings, "steps"),
        "--refine-steps",
        help="MALA moves per refinement level, after the independence moves (0: independence moves alone).",
    ),
    refine_independence: int = typer.Option(
        default_of(RefineSettings, "independence"),
        "--refine-independence",
        help="Independence Metropolis moves per refinement level (fresh draws from the generator).",
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
    **settings,
) -> None:
    """Train, sample and analyze every (model, seed) on Dask distributed, or every (model, objective,
    seed) with --objectives; report over seeds.

    Each run is a resumable directory whose training is handed to the workers in parts, the run
    with the most left first, so that the workers finish together. A task whose worker dies is
    run again and resumes from the checkpoint, and the same command run again skips finished runs. The report gives each
    metric's mean and 95 % interval over seeds and paired differences against the first model.

    --init names a finished sweep here: each run starts from its run of the same model and seed
    (e.g. --objectives kl,fab --steps 0 after a likelihood sweep).
    """
    from bgp4.sweep.runner import plan_sweep, run_sweep  # lazy: keeps the CLI's start-up free of Dask

    chosen = get_preset(preset) if preset is not None else NO_PRESET
    config = settings.pop("config", None)
    flags = {("compile" if k == "compile_mode" else k): v for k, v in settings.items()}
    from_file = read_config_file(config) if config else {}
    per_run = sorted(set(from_file) & {"data", "model", "seed", "workers"})
    if per_run:
        raise InputError(
            f"{config} (--config) sets {', '.join(per_run)}: a sweep sets them (--data, --models, --seeds, "
            "--threads-per-run)"
        )
    base = merge_settings(TrainSettings, {**chosen["train"], **from_file}, flags)
    # a preset's per-kind sizes sit between its common settings and the user's file and flags
    by_model = {
        m: merge_settings(TrainSettings, {**preset_train_settings(preset, m), **from_file}, flags)
        for m in chosen.get("by_model", {})
    }
    n_samples = samples if samples is not None else chosen["sample"].get("n", default_of(_SAMPLE, "n"))
    with exclusive(out):
        plan = plan_sweep(
            out,
            data,
            [m.strip() for m in models.split(",") if m.strip()],
            seeds,
            base,
            n_samples,
            threads_per_run=threads_per_run,
            gpus_per_run=gpus_per_run,
            md=chosen["md"],
            by_model=by_model,
            objectives=[o.strip() for o in objectives.split(",") if o.strip()] if objectives else None,
            refine=RefineSettings(levels=refine, steps=refine_steps, independence=refine_independence),
        )
        run_sweep(
            plan, scheduler=scheduler, workers=workers, progress=not quiet, say=typer.echo, worker_memory=worker_memory
        )
