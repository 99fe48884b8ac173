"""`bgp4 train`: a Boltzmann generator from the MD data; its options are also `bgp4 sweep`'s settings."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bgp4._io import exclusive
from bgp4.cli._app import default_of, handles_errors
from bgp4.config import merge_settings, read_config_file
from bgp4.settings import TrainSettings
from bgp4.simulation.system import DEFAULT_FORCE_FIELD, FORCE_FIELDS

__all__ = ["train"]


def _d(name: str) -> str:
    return f" [default: {default_of(TrainSettings, name)}]"


# `train` runs past 60 lines only in its signature: typer reads each option, with its `--help`
# text and its default (taken from the settings dataclasses), from one parameter.
@handles_errors
def train(
    data: Optional[Path] = typer.Option(
        None,
        "--data",
        help=(
            "MD data file from `bgp4 simulate`; none: no MD data (--objective kl or fab with --steps 0, and "
            "--init, whose model carries the molecule and coordinate transform, or from scratch: --molecule or "
            "--pdb with --temperature)."
        )
        + _d("data"),
    ),
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
    objective: Optional[str] = typer.Option(
        None,
        "--objective",
        help=(
            "What the energy phase trains: ml (nothing: likelihood only), mixed (the paper's likelihood + "
            "w_e reverse KL), kl (reverse KL of the flow's own samples, no data) or fab (flow annealed "
            "importance-sampling bootstrap: annealed importance sampling towards p^2/q, with p the Boltzmann "
            "density and q the flow's, and a prioritized replay buffer; no data)."
        )
        + _d("objective"),
    ),
    energy_steps: Optional[int] = typer.Option(
        None,
        "--energy-steps",
        help="Energy-phase steps after the likelihood phase (none with --objective ml)." + _d("energy_steps"),
    ),
    energy_lr: Optional[float] = typer.Option(
        None,
        "--energy-lr",
        help="Adam learning rate, energy phase; 0: the objective's (mixed 1e-5, kl and fab 1e-4)." + _d("energy_lr"),
    ),
    energy_lr_schedule: Optional[str] = typer.Option(
        None,
        "--energy-lr-schedule",
        help="Energy-phase learning rate: constant, or cosine (decay to 1 % over --energy-steps)."
        + _d("energy_lr_schedule"),
    ),
    energy_weight: Optional[float] = typer.Option(
        None, "--energy-weight", help="mixed: ratio w_e / w_l of energy to likelihood loss." + _d("energy_weight")
    ),
    fab_levels: Optional[int] = typer.Option(
        None,
        "--fab-levels",
        help="fab: intermediate distributions of each AIS run from q towards p^2/q (0: plain importance sampling)."
        + _d("fab_levels"),
    ),
    fab_moves: Optional[int] = typer.Option(
        None, "--fab-moves", help="fab: HMC moves per AIS level (MALA with --fab-leapfrog 1)." + _d("fab_moves")
    ),
    fab_independence: Optional[int] = typer.Option(
        None,
        "--fab-independence",
        help="fab: independence Metropolis moves per AIS level (fresh flow samples), before the HMC moves."
        + _d("fab_independence"),
    ),
    fab_leapfrog: Optional[int] = typer.Option(
        None,
        "--fab-leapfrog",
        help="fab: leapfrog steps per HMC move of --fab-moves, one evaluation each; 1 is MALA (fab-torch's HMC "
        "takes several)." + _d("fab_leapfrog"),
    ),
    fab_buffer: Optional[int] = typer.Option(
        None,
        "--fab-buffer",
        help="fab: replay buffer capacity in samples; training starts once it is an eighth full." + _d("fab_buffer"),
    ),
    fab_reuse: Optional[int] = typer.Option(
        None,
        "--fab-reuse",
        help="fab: gradient steps (each a batch drawn from the buffer) per AIS batch added to it." + _d("fab_reuse"),
    ),
    fab_power: Optional[float] = typer.Option(
        None,
        "--fab-power",
        help="fab: AIS schedule b_k = (k / (K + 1))^power over the K levels; 1 spaces them evenly, as fab-torch."
        + _d("fab_power"),
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
            "Clip the gradient norm to this value; 0: no clipping; -1: auto (10 for spline kinds and for kl and "
            "fab, else none)."
        )
        + _d("clip_grad"),
    ),
    weight_decay: Optional[float] = typer.Option(
        None,
        "--weight-decay",
        help=(
            "Likelihood phase: AdamW's decoupled weight decay (per unit learning rate, below 1 / lr) on the coupling "
            "nets' weight matrices, not their biases; a regularizer when the MD frames are few for the flow; 0: plain "
            "Adam."
        )
        + _d("weight_decay"),
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
        None,
        "--merge-every",
        help="P4Inv: optimizer steps between attempts to fold each layer's trained rank-one update u v^T into "
        "its frozen matrix A." + _d("merge_every"),
    ),
    force_every: Optional[int] = typer.Option(
        None,
        "--force-every",
        help="P4Inv: every n-th merge attempt folds the update in even when it is outside the merge bounds."
        + _d("force_every"),
    ),
    correct_every: Optional[int] = typer.Option(
        None,
        "--correct-every",
        help="P4Inv: every n-th merge attempt refines each layer's stored inverse of A (undoing rounding drift)."
        + _d("correct_every"),
    ),
    test_fraction: Optional[float] = typer.Option(
        None, "--test-fraction", help="Share of frames held out for the test NLL." + _d("test_fraction")
    ),
    eval_every: Optional[int] = typer.Option(
        None, "--eval-every", help="Steps between test-NLL evaluations." + _d("eval_every")
    ),
    keep_best: Optional[bool] = typer.Option(
        None,
        "--keep-best/--no-keep-best",
        help=(
            "End the likelihood phase with the weights of its lowest test NLL (measured every --eval-every"
            " steps) instead of its last; every step still runs, and the held-out frames then also choose the model."
        )
        + _d("keep_best"),
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
            "Hold every constrained X-H bond at its constraint length, so that the flow has no dimension "
            "for it (alanine dipeptide: 48 flow dims instead of 60). --no-fix-constrained: those bonds are flow "
            "dims too (the paper's 60), and importance weights are not defined (the target holds those bonds "
            "fixed, so the flow's density off them has no Boltzmann counterpart)."
        )
        + _d("fix_constrained"),
    ),
    zmatrix: Optional[str] = typer.Option(
        None,
        "--zmatrix",
        help=(
            "Internal coordinates of the flow: hand (the molecule's own z-matrix; for alanine dipeptide"
            " the hand-written one of the paper's setup) or auto (built from the bond graph: heavy atoms"
            " outward from a central rigid block, each hydrogen on its own heavy atom)."
        )
        + _d("zmatrix"),
    ),
    device: Optional[str] = typer.Option(
        None, help="auto|cpu|cuda|cuda:N for the flow (auto: CUDA when available)." + _d("device")
    ),
    seed: Optional[int] = typer.Option(
        None, help="Random seed (split, initialization, batches, samples)." + _d("seed")
    ),
    workers: Optional[int] = typer.Option(
        None, help="OpenMM processes that evaluate energies (0: one per core)." + _d("workers")
    ),
    temperature: Optional[float] = typer.Option(
        None,
        help=(
            "Temperature in K: of a data file that records none (a plain mdtraj file), or of a run without "
            "data (needed from scratch; with --init it replaces that run's)."
        ),
    ),
    compile_mode: Optional[str] = typer.Option(
        None,
        "--compile",
        help=(
            "torch.compile the likelihood step: auto|on|off. auto compiles CPU runs with MD data and at least 3,000"
            " steps that evaluate the likelihood (likelihood steps plus mixed or fab energy steps; rnvp,"
            " p4inv) or 1,000 (spline kinds), where the compile (30-70 s) is"
            " won back by ~25-40% faster steps; a failed compile falls back to plain PyTorch. Runs without MD"
            " data are not compiled."
        )
        + _d("compile"),
    ),
    init: Optional[Path] = typer.Option(
        None,
        "--init",
        help=(
            "Start from the model of this finished run instead of a fresh initialization (same model "
            "kind, architecture, z-matrix, seed and test fraction; of the same molecule and system). Its "
            "settings are not copied: give its --data and --model again, e.g. `--data D.h5 --model spline --steps 0 "
            "--energy-steps 3000 --objective fab` to add an energy phase to it."
        ),
    ),
    molecule: Optional[str] = typer.Option(
        None,
        "--molecule",
        help=(
            "From scratch without data (--data none, no --init): the molecule, alanine-dipeptide, "
            "alanine-tetrapeptide, alanine-hexapeptide or sequence:SEQ (a capped peptide in one-letter codes, "
            "e.g. sequence:AAA); its coordinate transform is fitted to "
            "its minimized structure with force-field widths at --temperature."
        ),
    ),
    pdb: Optional[Path] = typer.Option(
        None, "--pdb", help="From scratch without data: the molecule of this PDB file instead (not with --molecule)."
    ),
    forcefield: Optional[str] = typer.Option(
        None,
        "--forcefield",
        help=f"From scratch without data: {', '.join(FORCE_FIELDS)}. [default: {DEFAULT_FORCE_FIELD}]",
    ),
    solvent: Optional[str] = typer.Option(
        None, "--solvent", help="From scratch without data: obc (implicit water) or vacuum. [default: obc]"
    ),
    constraints: Optional[str] = typer.Option(
        None,
        "--constraints",
        help="From scratch without data: hbonds (X-H bonds fixed) or none. [default: hbonds]",
    ),
    config: Optional[Path] = typer.Option(
        None, "--config", help="TOML or YAML file with any of these settings; flags win."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Discard an existing run in --out and train again."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
) -> None:
    """Train a Boltzmann generator: maximum likelihood, then an energy phase (--objective mixed, kl or fab).

    Defaults are the paper's. Killed at any moment and rerun with the same command, training
    resumes from its last checkpoint; rerunning a finished run reports it and exits.
    """
    # lazy: keeps the CLI's start-up free of torch and OpenMM
    from bgp4.generator.train import train as run_training
    from bgp4.report.analyze import format_number

    flags = dict(
        data=str(data) if data else None,
        model=model,
        steps=steps,
        batch=batch,
        lr=lr,
        energy_steps=energy_steps,
        energy_lr=energy_lr,
        energy_lr_schedule=energy_lr_schedule,
        energy_weight=energy_weight,
        objective=objective,
        fab_levels=fab_levels,
        fab_power=fab_power,
        fab_moves=fab_moves,
        fab_leapfrog=fab_leapfrog,
        fab_independence=fab_independence,
        fab_buffer=fab_buffer,
        fab_reuse=fab_reuse,
        blocks=blocks,
        hidden=hidden,
        bins=bins,
        lr_schedule=lr_schedule,
        clip_grad=clip_grad,
        weight_decay=weight_decay,
        penalty_weight=penalty_weight,
        merge_every=merge_every,
        force_every=force_every,
        correct_every=correct_every,
        test_fraction=test_fraction,
        eval_every=eval_every,
        keep_best=keep_best,
        fix_constrained=fix_constrained,
        zmatrix=zmatrix,
        device=device,
        seed=seed,
        workers=workers,
        compile=compile_mode,
        temperature=temperature,
        init=str(init) if init else None,
        augment=augment,
        molecule=molecule,
        pdb=str(pdb) if pdb else None,
        forcefield=forcefield,
        solvent=solvent,
        constraints=constraints,
    )
    settings = merge_settings(TrainSettings, read_config_file(config) if config else {}, flags)
    with exclusive(out):
        summary, trained = run_training(settings, out, overwrite=overwrite, progress=not quiet)
    state = "trained" if trained else "already complete"
    nll = " -> ".join(format_number(summary.get(k)) for k in ("test_nll_start", "test_nll_end"))
    evaluations = summary.get("energy_evaluations", 0)
    typer.echo(f"{out}: {state}; test NLL {nll}; {evaluations:,} target energy evaluations")
