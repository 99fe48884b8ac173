"""`bgp4 sample` (samples, weights and AIS refinement of a trained run) and `bgp4 analyze` (the report)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bgp4._io import exclusive
from bgp4.analysis.grid import MAX_RAMA_BINS, N_BINS, TABLE_RAMA_BINS, check_rama_bins
from bgp4.cli._app import DEFAULT_DATA, default_of, handles_errors
from bgp4.errors import InputError
from bgp4.report.aggregate import write_sweep_report
from bgp4.settings import RefineSettings, SampleSettings

__all__ = ["analyze", "sample"]

_SAMPLE, _REFINE = SampleSettings, RefineSettings


# `sample` runs past 60 lines only in its signature: typer reads each option, with its `--help`
# text and its default (taken from the settings dataclasses), from one parameter.
@handles_errors
def sample(
    run: Path = typer.Argument(..., metavar="RUN", help="Run directory of a finished `bgp4 train`."),
    n: int = typer.Option(default_of(_SAMPLE, "n"), "--n", help="Number of samples."),
    out: Optional[Path] = typer.Option(None, "--out", help="Samples file (mdtraj HDF5). [default: RUN/samples.h5]"),
    batch: int = typer.Option(
        default_of(_SAMPLE, "batch"),
        help="Samples drawn and evaluated per batch (the flow takes them in slices, so its memory stays bounded).",
    ),
    device: str = typer.Option(
        default_of(_SAMPLE, "device"),
        help="auto|cpu|cuda|cuda:N for the flow (auto: CUDA when available; energies run on OpenMM processes).",
    ),
    seed: int = typer.Option(
        default_of(_SAMPLE, "seed"), help="Random seed of the prior samples and of the refinement."
    ),
    workers: int = typer.Option(
        default_of(_SAMPLE, "workers"), help="OpenMM processes that evaluate energies (0: one per core)."
    ),
    temperature: Optional[float] = typer.Option(
        None,
        help="Temperature in K, for a run whose complete.json records none (runs trained since 2026-11-26 record it).",
    ),
    overwrite: bool = typer.Option(
        False,
        "--overwrite",
        help="Draw again over an existing samples file, its refined file and any partial refinement; without it, a "
        "file of the same settings is kept and one of other settings refused.",
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
        default_of(_REFINE, "steps"),
        "--refine-steps",
        help=(
            "MALA/HMC moves per refinement level, after the independence moves (one energy+force "
            "evaluation and a backward pass through the flow per leapfrog step); 0: independence "
            "moves alone, at a half to a quarter of the cost, for a generator that covers every state"
            "."
        ),
    ),
    refine_independence: int = typer.Option(
        default_of(_REFINE, "independence"),
        "--refine-independence",
        help=(
            "Independence Metropolis moves per refinement level: fresh draws from the generator, "
            "accepted by their weights (one energy evaluation each; forces too when there are "
            "MALA/HMC moves); 0: MALA/HMC only."
        ),
    ),
    refine_leapfrog: int = typer.Option(
        default_of(_REFINE, "leapfrog"), "--refine-leapfrog", help="Leapfrog steps per move (1: MALA)."
    ),
    resample_ess: float = typer.Option(
        default_of(_REFINE, "resample_ess"),
        "--resample-ess",
        help=(
            "Sequential Monte Carlo: resample when the effective sample size (ESS) of the running weights, as a "
            "fraction of the samples, falls below this (0: plain "
            "AIS); each sample's lineage is kept, and analyze reports the ESS with the copies of one "
            "lineage counted once."
        ),
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
) -> None:
    """Draw samples from a trained generator (RUN of `bgp4 train`) with their energies (kJ/mol), the
    generator's log density log q and log importance weights.

    Samples whose energy is not finite, or that left the internal-coordinate domain, are kept,
    flagged and counted. With --refine K the same samples are then annealed towards the
    Boltzmann density in the generator's latent space (AIS); a killed refinement resumes.
    """
    # lazy: keeps the CLI's start-up free of torch and OpenMM
    from bgp4.generator.sample import default_samples_path, refine_run, sample_run

    settings = SampleSettings(n=n, batch=batch, device=device, seed=seed, workers=workers).validated()
    if refine is not None:  # refused before anything is written
        refinement = RefineSettings(
            levels=refine,
            steps=refine_steps,
            leapfrog=refine_leapfrog,
            resample_ess=resample_ess,
            independence=refine_independence,
        ).validated()
    with exclusive(out if out is not None else default_samples_path(run)):
        summary, _ = sample_run(run, settings, out, overwrite, progress=not quiet, temperature=temperature)
        _say_drawn(summary)
        if refine is not None:
            refined, _ = refine_run(
                run, settings, refinement, out, overwrite, progress=not quiet, temperature=temperature
            )
            _say_refined(refined, summary, refinement)


def _say_drawn(summary: dict) -> None:
    from bgp4.report.analyze import format_number

    typer.echo(
        f"{summary['samples']} samples: {summary['nonfinite_energy']} with non-finite energy, "
        f"{summary['out_of_domain']} outside the IC domain; mean energy {format_number(summary['mean_energy_kT'])} kT, "
        + (
            f"reverse ESS {format_number(summary['reverse_ess'], 3)}"
            if summary["reverse_ess"] is not None
            else "reverse ESS not defined (constrained bonds are flow dimensions; see complete.json)"
        )
    )


def _say_refined(refined: dict, summary: dict, refinement: RefineSettings) -> None:
    from bgp4.generator.refine import refine_note
    from bgp4.report.analyze import format_number

    typer.echo(
        f"refined (K={refinement.levels}): mean energy {format_number(refined['mean_energy_kT'])} kT, reverse ESS "
        f"{refined['reverse_ess'] if refined['reverse_ess'] is None else format(refined['reverse_ess'], '.3g')}, "
        f"{refined['evals_per_sample']:.3g} energy evaluations per sample"
    )
    note = refine_note(summary.get("reverse_ess"), refined, refinement.steps)
    if note:
        typer.echo(f"note: {note}")


@handles_errors
def analyze(
    ctx: typer.Context,
    runs: Optional[list[Path]] = typer.Argument(
        None, metavar="RUNS", help="Run directories with samples (e.g. runs/rnvp runs/p4inv)."
    ),
    data: Path = typer.Option(DEFAULT_DATA, "--data", help="The MD data file the runs were trained on."),
    out: Path = typer.Option(Path("report"), "--out", help="Report directory (figures, metrics.json, report.md)."),
    seed: int = typer.Option(
        0,
        help="Seed of the noise reference (MD frames with small Gaussian noise, a yardstick for the energy "
        "figures) and of the bootstrap intervals.",
    ),
    workers: int = typer.Option(0, help="OpenMM processes that evaluate energies (0: one per core)."),
    sweep_dir: Optional[Path] = typer.Option(
        None, "--sweep", help="Aggregate the sweep in this directory over seeds into SWEEP/report/ (instead of RUNS)."
    ),
    refresh: bool = typer.Option(
        False, "--refresh", help="With --sweep: analyze every run again (after an update of the analysis)."
    ),
    temperature: Optional[float] = typer.Option(
        None, help="Temperature of the data in K; only for a data file that records none."
    ),
    rama_bins: Optional[int] = typer.Option(
        None,
        "--rama-bins",
        help=f"Bins per axis of the Ramachandran KL divergence and total variation (TV) in the metrics "
        f"(2..{MAX_RAMA_BINS}; default {N_BINS}; the figures keep {N_BINS}); {TABLE_RAMA_BINS}: the grid of the "
        "published 300 K table (TA-BG's KL). With --sweep: default the grid of the "
        "sweep's last report, and runs analyzed on another grid are analyzed again; `bgp4 sweep` keeps that grid.",
    ),
) -> None:
    """Compare generators with the MD data: energy violins, Ramachandran plots, free energy, metrics."""
    if rama_bins is not None:
        check_rama_bins(rama_bins)
    SampleSettings(seed=seed, workers=workers).validated()  # with --sweep too, whether or not a run needs analyzing
    if sweep_dir is not None:
        if runs:
            raise InputError("give either run directories or --sweep DIR, not both")
        ignored = _given(ctx, "data", "out", "seed", "temperature")
        if ignored:
            raise InputError(
                f"{', '.join(ignored)} cannot go with --sweep: its runs are analyzed with the sweep's own data, "
                "seeds and temperature, into SWEEP/report/"
            )
        write_sweep_report(sweep_dir, refresh=refresh, workers=workers, rama_bins=rama_bins)
        typer.echo(f"report written to {sweep_dir / 'report' / 'report.md'}")
        return
    from bgp4.report.analyze import analyze as run_analysis  # lazy: keeps the CLI's start-up free of torch

    if not runs:
        raise InputError("name the run directories to analyze (or --sweep DIR)")
    if refresh:
        raise InputError("--refresh goes with --sweep DIR only")
    run_analysis(
        data, list(runs), out, seed=seed, workers=workers, temperature=temperature, rama_bins=rama_bins or N_BINS
    )
    typer.echo(f"report written to {out / 'report.md'}")


def _given(ctx: typer.Context, *names: str) -> list[str]:
    """The options among the parameters `names` that the command line set (not left at their default)."""
    # by name: typer carries its own copy of click, whose ParameterSource is not click's
    given = [n for n in names if getattr(ctx.get_parameter_source(n), "name", "DEFAULT") != "DEFAULT"]
    return [f"--{n.replace('_', '-')}" for n in given]
