"""`bgp4 simulate`: Langevin MD of the molecule into an mdtraj HDF5 file; `bgp4 merge`: several such files in one."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bgp4._io import exclusive
from bgp4.cli._app import DEFAULT_DATA, default_of, handles_errors
from bgp4.errors import InputError
from bgp4.simulation.md import MDSettings, completed, data_path
from bgp4.simulation.md import simulate as run_md
from bgp4.simulation.system import FORCE_FIELDS

__all__ = ["simulate", "merge", "molecule_choice", "MOLECULE_HELP", "SEQUENCE_HELP", "PDB_HELP"]

MOLECULE_HELP = (
    "Registered molecule to simulate: alanine-dipeptide, alanine-tetrapeptide, alanine-hexapeptide "
    "or sequence:SEQ (e.g. sequence:AAA); empty: the default, alanine dipeptide. Only one of --molecule, "
    "--sequence, --pdb."
)
SEQUENCE_HELP = (
    "Simulate the capped peptide Ace-SEQ-Nme built from one-letter amino-acid codes (AAA: "
    "Ace-Ala3-Nme), or codes separated by - (Ala-Ala-Ala); the data file records it as the molecule "
    "sequence:SEQ in one-letter codes. Only one of --molecule, --sequence, --pdb."
)
FORCEFIELD_HELP = (
    f"Force field (OpenMM's files): {', '.join(FORCE_FIELDS)}; amber96 with obc is ff96 with OBC1, "
    "openmmtools' AlanineDipeptideImplicit, the published 300 K table's dipeptide."
)
PDB_HELP = (
    "Simulate the molecule of this PDB (or PDBx/mmCIF) file: any atom order and hydrogen naming "
    "OpenMM reads; missing hydrogens are added, the structure minimized. Only one of --molecule, --sequence, "
    "--pdb."
)


def molecule_choice(molecule: str, sequence: str, pdb: str) -> str:
    """The molecule name that --molecule or --sequence give (InputError when more than one of the
    three is given); "" when neither is (the default molecule, or the --pdb file's)."""
    if sum(bool(v) for v in (molecule, sequence, pdb)) > 1:
        raise InputError("give only one of --molecule, --sequence and --pdb")
    return f"sequence:{sequence}" if sequence else molecule  # SEQUENCE_PREFIX (molecule layer)


_MD = MDSettings


# `simulate` runs past 60 lines only in its signature: typer reads each option, with its `--help`
# text and its default (taken from the settings dataclasses), from one parameter.
@handles_errors
def simulate(
    out: Optional[Path] = typer.Option(
        None,
        "--out",
        help=f"Output mdtraj HDF5 file (.h5). [default: {DEFAULT_DATA} for the default molecule, system and "
        "temperature; else data/<molecule>[-<forcefield>][-vacuum][-free]-<T>K.h5, as `bgp4 pipeline` names it]",
    ),
    frames: int = typer.Option(
        default_of(_MD, "frames"),
        help=(
            "Frames to save in total, split evenly over replicas (with --replica-exchange: frames of the lowest "
            "temperature, one per exchange attempt). A partial run (plain MD or replica exchange) resumes with another "
            "value, longer or shorter."
        ),
    ),
    temperature: float = typer.Option(default_of(_MD, "temperature"), help="Temperature in K."),
    timestep_fs: float = typer.Option(
        default_of(_MD, "timestep_fs"),
        "--timestep-fs",
        help="Integration time step in fs (0: 2 fs with X-H bonds constrained, 1 fs with --constraints none).",
    ),
    save_every: int = typer.Option(
        default_of(_MD, "save_every"),
        "--save-every",
        help=(
            "Integration steps between saved frames (with --replica-exchange: steps of each temperature between "
            "exchange attempts)."
        ),
    ),
    friction: float = typer.Option(default_of(_MD, "friction"), help="Langevin friction in 1/ps."),
    equilibration_ps: float = typer.Option(
        default_of(_MD, "equilibration_ps"), "--equilibration-ps", help="Equilibration per replica in ps (not saved)."
    ),
    replicas: int = typer.Option(
        default_of(_MD, "replicas"), help="Independent trajectories, one process each (0: one per core)."
    ),
    seed: int = typer.Option(default_of(_MD, "seed"), help="Random seed; each replica derives its own from it."),
    platform: str = typer.Option(
        default_of(_MD, "platform"),
        help=(
            "OpenMM platform: auto|Reference|CPU|CUDA|OpenCL "
            "(auto: Reference up to 150 atoms without custom forces, else CPU)."
        ),
    ),
    molecule: str = typer.Option(
        default_of(_MD, "molecule"),
        help=MOLECULE_HELP,
    ),
    sequence: str = typer.Option(
        "",
        "--sequence",
        help=SEQUENCE_HELP,
    ),
    pdb: str = typer.Option(
        default_of(_MD, "pdb"),
        "--pdb",
        help=PDB_HELP,
    ),
    forcefield: str = typer.Option(default_of(_MD, "forcefield"), "--forcefield", help=FORCEFIELD_HELP),
    solvent: str = typer.Option(
        default_of(_MD, "solvent"), "--solvent", help="Solvent: obc (OBC implicit water) or vacuum."
    ),
    constraints: str = typer.Option(
        default_of(_MD, "constraints"),
        "--constraints",
        help="hbonds: every X-H bond held at its length (fixed in the flows too); none: every bond free.",
    ),
    replica_exchange: str = typer.Option(
        default_of(_MD, "replica_exchange"),
        "--replica-exchange",
        help=(
            "Replica exchange (parallel tempering, openmmtools) over TMIN:TMAX:N, N temperatures geometric from "
            "TMIN to TMAX (e.g. 300:600:8), in one process; TMIN must equal --temperature, and the file keeps its "
            "frames. Not with --replicas. Empty: plain MD."
        ),
    ),
    velocity_refresh: str = typer.Option(
        default_of(_MD, "velocity_refresh"),
        "--velocity-refresh",
        help=(
            "With --replica-exchange, when walkers get new Maxwell-Boltzmann velocities: iteration (every walker, "
            "every iteration; short iterations then damp the dynamics) or exchange (only a walker that changed "
            "temperature; the others continue their trajectories, so --save-every may be short, e.g. 100 steps)."
        ),
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace a finished output file and discard a partial run."
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
) -> None:
    """Run Langevin MD of a molecule (default: alanine dipeptide, amber99sb-ildn, OBC implicit solvent) and save frames.

    The molecule is a built-in one (--molecule), a capped peptide (--sequence) or a structure file
    (--pdb); the data file records it with its force field, solvent and constraints, and every later
    stage takes them from there. Defaults are the paper's 600 K protocol. A run cut off at any moment
    resumes when the same command is run again; rerunning a finished one reports it and exits.
    With --replica-exchange the run is parallel tempering and the file holds the lowest temperature's frames.
    """
    molecule = molecule_choice(molecule, sequence, pdb)
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
        pdb=pdb,
        forcefield=forcefield,
        solvent=solvent,
        constraints=constraints,
        replica_exchange=replica_exchange,
        velocity_refresh=velocity_refresh,
    )
    out = out if out is not None else data_path(Path("."), settings)
    if not overwrite and completed(out, settings):
        typer.echo(f"{out}: already complete ({settings.frames} frames)")
        return
    with exclusive(out):
        path = run_md(out, settings, overwrite=overwrite, progress=not quiet)
    lowest = f" at {temperature:g} K" if replica_exchange else ""
    typer.echo(f"wrote {settings.frames} frames{lowest} to {path}")


@handles_errors
def merge(
    out: Path = typer.Argument(..., metavar="OUT", help="The merged data file to write (.h5)."),
    inputs: list[Path] = typer.Argument(
        ...,
        metavar="INPUTS",
        help="Two or more bgp4 data files of one molecule, system and temperature, in the order to keep.",
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace OUT if it exists."),
) -> None:
    """Merge data files of one molecule, system and temperature (say replica exchanges with other seeds) into one.

    Frames (nm) and energies (kJ/mol) are concatenated in the order given; the file records each
    input's frames and MD energy evaluations (`merged_from`), so reports count the MD of all of them.
    Inputs of different molecules, systems or temperatures are refused, with nothing written.
    """
    from bgp4.simulation.data import read_settings  # mdtraj and tables: not at `bgp4 --help`
    from bgp4.simulation.merge import merge as merge_files

    with exclusive(out):
        path = merge_files(out, inputs, overwrite=overwrite)
    typer.echo(f"wrote {read_settings(path)['frames']} frames of {len(inputs)} files to {path}")
