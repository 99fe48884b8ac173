"""The `bgp4` command line: one thin command per stage; the numerics live in the library.

Library errors become one line on stderr: exit code 2 for bad input (`InputError`), 1 for
other failures (`Bgp4Error`), 130 after Ctrl-C. No traceback for user mistakes.

The command functions run past 60 lines only in their signatures: typer reads each option, with
its `--help` text and its default (taken from the settings dataclasses), from one parameter.
"""

from __future__ import annotations

import functools
import inspect
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Optional

import typer

from bgp4 import __version__
from bgp4.errors import Bgp4Error, InputError
from bgp4.settings import RefineSettings, SampleSettings, TrainSettings
from bgp4.simulation.md import MDSettings


def _default(settings: type, name: str):
    """The default of field `name` of a settings dataclass: the one source of every CLI default."""
    return settings.__dataclass_fields__[name].default


_MD, _SAMPLE, _REFINE = MDSettings, SampleSettings, RefineSettings
#: Below this acceptance of the independence moves at the last level, `sample --refine` suggests MALA moves.
STALLED_INDEPENDENCE = 0.05
#: Where `bgp4 simulate` writes and `bgp4 train` / `bgp4 analyze` read by default.
DEFAULT_DATA = Path(_default(TrainSettings, "data"))

app = typer.Typer(
    help="Boltzmann generators for alanine dipeptide with P4Inv invertible linear layers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _fail(message: str, code: int) -> None:
    first = (message.strip().splitlines() or ["unknown error"])[0]  # one line, always
    typer.echo(f"bgp4: error: {first}", err=True)
    raise typer.Exit(code)


def handles_errors(command: Callable) -> Callable:
    """Turn library exceptions into a one-line message and an exit code."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except InputError as exc:
            _fail(str(exc), 2)
        except Bgp4Error as exc:
            _fail(str(exc), 1)
        except KeyboardInterrupt:
            _fail("interrupted; rerun the same command to resume", 130)
        except OSError as exc:
            _fail(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc), 1)

    return wrapper


def _version(value: bool) -> None:
    if value:
        typer.echo(f"bgp4 {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Boltzmann generators for alanine dipeptide with P4Inv invertible linear layers."""


@app.command()
@handles_errors
def simulate(
    out: Path = typer.Option(DEFAULT_DATA, "--out", help="Output mdtraj HDF5 file (.h5)."),
    frames: int = typer.Option(_default(_MD, "frames"), help="Frames to save in total, split evenly over replicas."),
    temperature: float = typer.Option(_default(_MD, "temperature"), help="Temperature in K."),
    timestep_fs: float = typer.Option(
        _default(_MD, "timestep_fs"), "--timestep-fs", help="Integration time step in fs."
    ),
    save_every: int = typer.Option(
        _default(_MD, "save_every"), "--save-every", help="Integration steps between saved frames."
    ),
    friction: float = typer.Option(_default(_MD, "friction"), help="Langevin friction in 1/ps."),
    equilibration_ps: float = typer.Option(
        _default(_MD, "equilibration_ps"), "--equilibration-ps", help="Equilibration per replica in ps (not saved)."
    ),
    replicas: int = typer.Option(
        _default(_MD, "replicas"), help="Independent trajectories, one process each (0: one per core)."
    ),
    seed: int = typer.Option(_default(_MD, "seed"), help="Random seed; each replica derives its own from it."),
    platform: str = typer.Option(
        _default(_MD, "platform"),
        help="OpenMM platform: auto|Reference|CPU|CUDA|OpenCL (auto: Reference, the fastest for a small molecule).",
    ),
    molecule: str = typer.Option(
        _default(_MD, "molecule"),
        help=(
            "Registered molecule to simulate (bgp4.simulation.molecule.MOLECULES); empty: the "
            "default, alanine dipeptide."
        ),
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace a finished output file and discard a partial run."
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
) -> None:
    """Run Langevin MD of the molecule (alanine dipeptide: amber99sb-ildn, OBC implicit solvent) and save frames.

    Defaults are the paper's 600 K protocol. A run cut off at any moment resumes when the same
    command is run again; rerunning a finished one reports it and exits.
    """
    from bgp4.simulation.md import completed
    from bgp4.simulation.md import simulate as run_md

    settings = MDSettings(
        frames=frames,
        temperature=temperature,
        timestep_fs=timestep_fs,
        save_every=save_every,
        friction=friction,
        equilibration_ps=equilibration_ps,
        replicas=replicas,
        seed=seed,
        platform=platform,
        molecule=molecule,
    )
    if not overwrite and completed(out, settings):
        typer.echo(f"{out}: already complete ({settings.frames} frames)")
        return
    path = run_md(out, settings, overwrite=overwrite, progress=not quiet)
    typer.echo(f"wrote {settings.frames} frames to {path}")


def _d(name: str) -> str:
    return f" [default: {_default(TrainSettings, name)}]"


@app.command()
@handles_errors
def train(
    data: Optional[Path] = typer.Option(None, "--data", help="MD data file from `bgp4 simulate`." + _d("data")),
    model: Optional[str] = typer.Option(
        None,
        "--model",
        help=(
            "Generator: rnvp (affine couplings + swaps), p4inv (P4Inv layers instead of swaps), "
            "spline (circular rational-quadratic spline couplings) or spline-p4inv (with P4Inv layers"
            " on the non-circular coordinates)."
        )
        + _d("model"),
    ),
    out: Path = typer.Option(..., "--out", help="Run directory (settings, checkpoints, metrics, model, figures)."),
    steps: Optional[int] = typer.Option(None, help="Maximum-likelihood steps." + _d("steps")),
    batch: Optional[int] = typer.Option(None, help="Batch size (frames and flow samples)." + _d("batch")),
    lr: Optional[float] = typer.Option(None, help="Adam learning rate, likelihood phase." + _d("lr")),
    energy_steps: Optional[int] = typer.Option(
        None, "--energy-steps", help="Likelihood + energy steps after the first phase." + _d("energy_steps")
    ),
    energy_lr: Optional[float] = typer.Option(
        None, "--energy-lr", help="Adam learning rate, energy phase." + _d("energy_lr")
    ),
    energy_weight: Optional[float] = typer.Option(
        None, "--energy-weight", help="Ratio w_e / w_l of energy to likelihood loss." + _d("energy_weight")
    ),
    blocks: Optional[int] = typer.Option(
        None,
        help=(
            "Blocks of 2 couplings (each followed by a swap, permutation or P4Inv layer); 0: the "
            "kind's default (rnvp/p4inv 25, spline kinds 6)."
        )
        + _d("blocks"),
    ),
    hidden: Optional[int] = typer.Option(
        None,
        help="Hidden width of the coupling nets; 0: the kind's default (rnvp/p4inv 60, spline kinds 256)."
        + _d("hidden"),
    ),
    bins: Optional[int] = typer.Option(
        None, help="Spline kinds: bins of each rational-quadratic spline (2..64); 0: 8." + _d("bins")
    ),
    lr_schedule: Optional[str] = typer.Option(
        None,
        "--lr-schedule",
        help=(
            "Likelihood-phase learning rate: constant, cosine (decay to 1 %) or auto (constant for "
            "rnvp/p4inv, cosine for spline kinds)."
        )
        + _d("lr_schedule"),
    ),
    clip_grad: Optional[float] = typer.Option(
        None,
        "--clip-grad",
        help=(
            "Clip the gradient norm to this value; 0: no clipping; -1: auto (none for rnvp/p4inv, 10 for spline kinds)."
        )
        + _d("clip_grad"),
    ),
    penalty_weight: Optional[float] = typer.Option(
        None,
        "--penalty-weight",
        help=(
            "P4Inv: weight C_p of the penalty on log|G| and log|det A| outside the merge bounds (0: "
            "none, as in the paper's BG experiment)."
        )
        + _d("penalty_weight"),
    ),
    merge_every: Optional[int] = typer.Option(
        None, "--merge-every", help="P4Inv: optimizer steps between merge attempts (N)." + _d("merge_every")
    ),
    force_every: Optional[int] = typer.Option(
        None, "--force-every", help="P4Inv: force every n-th merge attempt." + _d("force_every")
    ),
    correct_every: Optional[int] = typer.Option(
        None, "--correct-every", help="P4Inv: correct the inverse every n-th attempt." + _d("correct_every")
    ),
    test_fraction: Optional[float] = typer.Option(
        None, "--test-fraction", help="Share of frames held out for the test NLL." + _d("test_fraction")
    ),
    eval_every: Optional[int] = typer.Option(
        None, "--eval-every", help="Steps between test-NLL evaluations." + _d("eval_every")
    ),
    augment: Optional[bool] = typer.Option(
        None,
        "--augment/--no-augment",
        help=(
            "Data augmentation: every training batch relabels the three hydrogens of each methyl-like"
            " group (three H on one atom with identical force-field parameters) cyclically at random,"
            " a rotation by 120 degrees that leaves the energy unchanged; test NLL on the frames as "
            "simulated."
        )
        + _d("augment"),
    ),
    fix_constrained: Optional[bool] = typer.Option(
        None,
        "--fix-constrained/--no-fix-constrained",
        help=(
            "Hold every constrained X-H bond at its constraint length (48 flow dims; HA leaves the "
            "rigid block). --no-fix-constrained: the paper's 60 dims, where importance weights are "
            "not defined."
        )
        + _d("fix_constrained"),
    ),
    device: Optional[str] = typer.Option(None, help="auto|cpu|cuda (auto: CUDA when available)." + _d("device")),
    seed: Optional[int] = typer.Option(
        None, help="Random seed (split, initialization, batches, samples)." + _d("seed")
    ),
    workers: Optional[int] = typer.Option(None, help="Energy-bridge processes (0: one per core)." + _d("workers")),
    temperature: Optional[float] = typer.Option(
        None, help="Temperature of the data in K; only for a data file that records none (a plain mdtraj file)."
    ),
    compile_mode: Optional[str] = typer.Option(
        None,
        "--compile",
        help=(
            "torch.compile the likelihood step: auto|on|off. auto compiles CPU runs of at least 3,000"
            " steps (about a minute once, then ~40% faster steps); a failed compile falls back to "
            "plain PyTorch."
        )
        + _d("compile"),
    ),
    init: Optional[Path] = typer.Option(
        None,
        "--init",
        help=(
            "Start from the model of this finished run instead of a fresh initialization (same model "
            "kind, architecture, data, seed and test fraction), e.g. `--steps 0 --energy-steps 3000` "
            "to add an energy phase to it."
        ),
    ),
    config: Optional[Path] = typer.Option(
        None, "--config", help="TOML or YAML file with any of these settings; flags win."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Discard an existing run in --out and train again."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
) -> None:
    """Train a Boltzmann generator: maximum likelihood, then likelihood + energy (reverse KL).

    Defaults are the paper's. Killed at any moment and rerun with the same command, training
    resumes from its last checkpoint; rerunning a finished run reports it and exits.
    """
    from bgp4.generator.train import train as run_training
    from bgp4.report.analyze import format_number
    from bgp4.settings import merge_settings, read_config_file

    flags = dict(
        data=str(data) if data else None,
        model=model,
        steps=steps,
        batch=batch,
        lr=lr,
        energy_steps=energy_steps,
        energy_lr=energy_lr,
        energy_weight=energy_weight,
        blocks=blocks,
        hidden=hidden,
        bins=bins,
        lr_schedule=lr_schedule,
        clip_grad=clip_grad,
        penalty_weight=penalty_weight,
        merge_every=merge_every,
        force_every=force_every,
        correct_every=correct_every,
        test_fraction=test_fraction,
        eval_every=eval_every,
        fix_constrained=fix_constrained,
        device=device,
        seed=seed,
        workers=workers,
        compile=compile_mode,
        temperature=temperature,
        init=str(init) if init else None,
        augment=augment,
    )
    settings = merge_settings(TrainSettings, read_config_file(config) if config else {}, flags)
    summary, trained = run_training(settings, out, overwrite=overwrite, progress=not quiet)
    state = "trained" if trained else "already complete"
    nll = " -> ".join(format_number(summary.get(k)) for k in ("test_nll_start", "test_nll_end"))
    typer.echo(f"{out}: {state}; test NLL {nll}")


@app.command()
@handles_errors
def sample(
    run: Path = typer.Argument(..., help="Run directory of a finished `bgp4 train`."),
    n: int = typer.Option(_default(_SAMPLE, "n"), "--n", help="Number of samples."),
    out: Optional[Path] = typer.Option(None, "--out", help="Samples file (mdtraj HDF5). [default: RUN/samples.h5]"),
    batch: int = typer.Option(_default(_SAMPLE, "batch"), help="Samples drawn and evaluated per batch."),
    device: str = typer.Option(
        _default(_SAMPLE, "device"), help="auto|cpu|cuda for the flow (energies run on OpenMM workers)."
    ),
    seed: int = typer.Option(_default(_SAMPLE, "seed"), help="Random seed of the prior samples."),
    workers: int = typer.Option(_default(_SAMPLE, "workers"), help="Energy-bridge processes (0: one per core)."),
    temperature: Optional[float] = typer.Option(None, help="Temperature in K; only for a run that records none."),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace an existing samples file made with other settings."
    ),
    refine: Optional[int] = typer.Option(
        None,
        "--refine",
        help=(
            "Also refine the samples by annealed importance sampling with K levels (K = 0: the raw "
            "weights); writes <samples>-refined.h5."
        ),
    ),
    refine_steps: int = typer.Option(
        _default(_REFINE, "steps"),
        "--refine-steps",
        help=(
            "MALA/HMC moves per refinement level, after the independence moves (one energy+force "
            "evaluation and a backward pass through the flow per leapfrog step); 0: independence "
            "moves alone, at a half to a quarter of the cost, for a generator that covers every state"
            " (README: AIS)."
        ),
    ),
    refine_independence: int = typer.Option(
        _default(_REFINE, "independence"),
        "--refine-independence",
        help=(
            "Independence Metropolis moves per refinement level: fresh draws from the generator, "
            "accepted by their weights (one energy evaluation each; forces too when there are "
            "MALA/HMC moves); 0: MALA/HMC only."
        ),
    ),
    refine_leapfrog: int = typer.Option(
        _default(_REFINE, "leapfrog"), "--refine-leapfrog", help="Leapfrog steps per move (1: MALA)."
    ),
    resample_ess: float = typer.Option(
        _default(_REFINE, "resample_ess"),
        "--resample-ess",
        help=(
            "SMC: resample when the ESS of the running weights falls below this fraction (0: plain "
            "AIS); each sample's lineage is kept, and analyze reports the ESS with the copies of one "
            "lineage counted once."
        ),
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
) -> None:
    """Draw samples with their energies (kJ/mol), log q and log importance weights.

    Samples whose energy is not finite, or that left the internal-coordinate domain, are kept,
    flagged and counted. With --refine K the same samples are then annealed towards the
    Boltzmann density in the generator's latent space (AIS); a killed refinement resumes.
    """
    from bgp4.generator.sample import refine_run, sample_run
    from bgp4.report.analyze import format_number

    settings = SampleSettings(n=n, batch=batch, device=device, seed=seed, workers=workers).validated()
    if refine is not None:  # refused before anything is written
        refinement = RefineSettings(
            levels=refine,
            steps=refine_steps,
            leapfrog=refine_leapfrog,
            resample_ess=resample_ess,
            independence=refine_independence,
        ).validated()
    summary, _ = sample_run(run, settings, out, overwrite, progress=not quiet, temperature=temperature)
    typer.echo(
        f"{summary['samples']} samples: {summary['nonfinite_energy']} with non-finite energy, "
        f"{summary['out_of_domain']} outside the IC domain; mean energy {format_number(summary['mean_energy_kT'])} kT, "
        + (
            f"reverse ESS {format_number(summary['reverse_ess'], 3)}"
            if summary["reverse_ess"] is not None
            else "reverse ESS not defined (constrained bonds are flow dimensions; see complete.json)"
        )
    )
    if refine is not None:
        refined, _ = refine_run(run, settings, refinement, out, overwrite, progress=not quiet)
        typer.echo(
            f"refined (K={refine}): mean energy {format_number(refined['mean_energy_kT'])} kT, reverse ESS "
            f"{refined['reverse_ess'] if refined['reverse_ess'] is None else format(refined['reverse_ess'], '.3g')}, "
            f"{refined['evals_per_sample']:.3g} energy evaluations per sample"
        )
        note = _refine_note(summary.get("reverse_ess"), refined, refinement.steps)
        if note:
            typer.echo(f"note: {note}")


def _refine_note(raw_ess: float | None, refined: dict, steps: int) -> str | None:
    """A hint when refinement went wrong in a way the user can fix with the moves."""
    # with SMC resampling the copies of one lineage count once; a margin keeps noise from triggering it
    ess = refined.get("lineage_ess", refined.get("reverse_ess"))
    rate = refined.get("final_independence_acceptance")
    if raw_ess is not None and ess is not None and ess < 0.8 * raw_ess:
        return (
            f"refinement lowered the reverse ESS ({raw_ess:.3g} -> {ess:.3g}): a few samples carry most of the weight; "
            + (
                "--refine-steps 1 adds MALA moves, which keep samples from sticking at rare states"
                if steps == 0
                else "more levels (--refine K) spread it over more moves"
            )
        )
    if steps == 0 and rate is not None and rate < STALLED_INDEPENDENCE:
        return (
            f"the generator's own draws were accepted in only {rate:.1%} of the independence moves at the last "
            "level, so the samples hardly moved there; --refine-steps 1 adds MALA moves"
        )
    return None


@app.command()
@handles_errors
def analyze(
    runs: Optional[list[Path]] = typer.Argument(None, help="Run directories with samples (e.g. runs/rnvp runs/p4inv)."),
    data: Path = typer.Option(DEFAULT_DATA, "--data", help="The MD data file the runs were trained on."),
    out: Path = typer.Option(Path("report"), "--out", help="Report directory (figures, metrics.json, report.md)."),
    seed: int = typer.Option(0, help="Seed of the noise reference."),
    workers: int = typer.Option(0, help="Energy-bridge processes (0: one per core)."),
    sweep_dir: Optional[Path] = typer.Option(
        None, "--sweep", help="Aggregate the sweep in this directory over seeds into SWEEP/report/ (instead of RUNS)."
    ),
    refresh: bool = typer.Option(
        False, "--refresh", help="With --sweep: analyze every run again (after an update of the analysis)."
    ),
    temperature: Optional[float] = typer.Option(
        None, help="Temperature of the data in K; only for a data file that records none."
    ),
) -> None:
    """Compare generators with the MD data: energy violins, Ramachandran plots, free energy, metrics."""
    if sweep_dir is not None:
        from bgp4.report.aggregate import write_sweep_report

        if runs:
            raise InputError("give either run directories or --sweep DIR, not both")
        write_sweep_report(sweep_dir, refresh=refresh, workers=workers)
        typer.echo(f"report written to {sweep_dir / 'report' / 'report.md'}")
        return
    from bgp4.report.analyze import analyze as run_analysis

    if not runs:
        raise InputError("name the run directories to analyze (or --sweep DIR)")
    run_analysis(data, list(runs), out, seed=seed, workers=workers, temperature=temperature)
    typer.echo(f"report written to {out / 'report.md'}")


@app.command()
@handles_errors
def pipeline(
    preset: str = typer.Option("quick", help="quick (minutes on 2 cores) or paper (the full reproduction)."),
    out: Path = typer.Option(Path("out/quick"), "--out", help="Directory for data, runs and report."),
    seed: int = typer.Option(0, help="Seed of every stage."),
    device: str = typer.Option("auto", help="auto|cpu|cuda for training and sampling."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """Simulate, train RNVP and P4Inv, sample and analyze; completed stages are skipped on rerun."""
    from bgp4.pipeline import run_pipeline

    run_pipeline(preset, out, seed=seed, device=device, progress=not quiet, say=typer.echo)


# `bgp4 sweep` takes every `bgp4 train` setting with train's own option (name, help, default);
# these train parameters are not settings, or the sweep has its own meaning for them
_NOT_SWEEP_SETTINGS = {"out", "overwrite", "quiet", "data", "model", "seed", "workers"}


def _with_train_settings(command: Callable) -> Callable:
    """Append train's setting options to `command`'s signature; they arrive in its **settings."""
    own = [p for p in inspect.signature(command).parameters.values() if p.kind is not p.VAR_KEYWORD]
    hints = typing.get_type_hints(train)  # typer reads types from the annotations, resolved here
    shared = [
        p.replace(annotation=hints[name])
        for name, p in inspect.signature(train).parameters.items()
        if name not in _NOT_SWEEP_SETTINGS
    ]
    command.__signature__ = inspect.Signature(own + shared)
    command.__annotations__.update({p.name: p.annotation for p in shared})
    return command


@app.command()
@handles_errors
@_with_train_settings
def sweep(
    data: Path = typer.Option(
        ..., "--data", help="MD data file; simulated first (with the preset's MD settings) if it does not exist."
    ),
    models: str = typer.Option(
        "rnvp,p4inv",
        "--models",
        help="Comma-separated generators; the first is the reference of the paired comparisons.",
    ),
    seeds: int = typer.Option(
        3, "--seeds", help="Seeds per model (0 .. N-1); seed k gives every model the same train/test split."
    ),
    out: Path = typer.Option(..., "--out", help="Sweep directory: runs/<model>-s<seed>/, report/."),
    preset: Optional[str] = typer.Option(
        None,
        "--preset",
        help="quick|paper: the train, sample and MD sizes of `bgp4 pipeline`; settings given here win.",
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
        None, "--workers", help="Local cluster: worker processes, one task each. [default: cores / threads-per-run]"
    ),
    threads_per_run: int = typer.Option(1, "--threads-per-run", help="Torch threads and energy processes of each run."),
    gpus_per_run: float = typer.Option(
        0.0,
        "--gpus-per-run",
        help=(
            "GPUs per run, as Dask worker resources (start workers with --resources GPU=1); 0.5 puts two runs on a GPU."
        ),
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
    **settings,
) -> None:
    """Train, sample and analyze every (model, seed) on Dask distributed; report over seeds.

    Each run is a resumable directory whose training is handed to the workers in parts, the run
    with the most left first, so that the workers finish together. A task whose worker dies is
    run again and resumes from the checkpoint, and the same command run again skips finished runs. The report gives each
    metric's mean and 95 % interval over seeds and paired differences against the first model.
    """
    from bgp4.pipeline import PRESETS
    from bgp4.settings import merge_settings, read_config_file
    from bgp4.sweep.runner import plan_sweep, run_sweep

    if preset is not None and preset not in PRESETS:
        raise InputError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    chosen = PRESETS[preset] if preset else {"md": {}, "train": {}, "sample": {}}
    config = settings.pop("config", None)
    flags = {("compile" if k == "compile_mode" else k): v for k, v in settings.items()}
    from_file = read_config_file(config) if config else {}
    base = merge_settings(TrainSettings, {**chosen["train"], **from_file}, flags)
    # a preset's per-kind sizes sit between its common settings and the user's file and flags
    by_model = {
        m: merge_settings(TrainSettings, {**chosen["train"], **own, **from_file}, flags)
        for m, own in chosen.get("by_model", {}).items()
    }
    n_samples = samples if samples is not None else chosen["sample"].get("n", _default(_SAMPLE, "n"))
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
    )
    run_sweep(plan, scheduler=scheduler, workers=workers, progress=not quiet, say=typer.echo)


def main(argv: Optional[list[str]] = None) -> None:
    """Console-script entry point."""
    app(args=argv, prog_name="bgp4")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
