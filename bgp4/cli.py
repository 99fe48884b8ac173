"""The `bgp4` command line: one thin command per stage; the numerics live in the library.

Library errors become one line on stderr: exit code 2 for bad input (`InputError`), 1 for
other failures (`Bgp4Error`), 130 after Ctrl-C. No traceback for user mistakes.
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Callable, Optional

import typer

from bgp4 import __version__
from bgp4.errors import Bgp4Error, InputError

app = typer.Typer(
    help="Boltzmann generators for alanine dipeptide with P4Inv invertible linear layers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _fail(message: str, code: int) -> None:
    typer.echo(f"bgp4: error: {message}", err=True)
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
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Boltzmann generators for alanine dipeptide with P4Inv invertible linear layers."""


@app.command()
@handles_errors
def simulate(
    out: Path = typer.Option(Path("data/ala2-600K.h5"), "--out", help="Output mdtraj HDF5 file (.h5)."),
    frames: int = typer.Option(500_000, help="Frames to save in total, split evenly over replicas."),
    temperature: float = typer.Option(600.0, help="Temperature in K."),
    timestep_fs: float = typer.Option(2.0, "--timestep-fs", help="Integration time step in fs."),
    save_every: int = typer.Option(10, "--save-every", help="Integration steps between saved frames."),
    friction: float = typer.Option(1.0, help="Langevin friction in 1/ps."),
    equilibration_ps: float = typer.Option(100.0, "--equilibration-ps", help="Equilibration per replica in ps (not saved)."),
    replicas: int = typer.Option(0, help="Independent trajectories, one process each (0: one per core)."),
    seed: int = typer.Option(0, help="Random seed; each replica derives its own from it."),
    platform: str = typer.Option("auto", help="OpenMM platform: auto|Reference|CPU|CUDA|OpenCL (auto: the fastest for 22 atoms, Reference)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a finished output file and discard a partial run."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
) -> None:
    """Run Langevin MD of alanine dipeptide (amber99sb-ildn, OBC implicit solvent) and save frames.

    Defaults are the paper's 600 K protocol. A run cut off at any moment resumes when the same
    command is run again.
    """
    from bgp4.md import MDSettings, simulate as run_md

    settings = MDSettings(frames, temperature, timestep_fs, save_every, friction, equilibration_ps, replicas, seed, platform)
    path = run_md(out, settings, overwrite=overwrite, progress=not quiet)
    typer.echo(f"wrote {settings.frames} frames to {path}")


def main(argv: Optional[list[str]] = None) -> None:
    """Console-script entry point."""
    app(args=argv, prog_name="bgp4")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
