"""The typer app of the `bgp4` command line, its error handling and the defaults its commands share.

The command modules (`md`, `training`, `sampling`, `sweeps`) take the error handling and the
defaults from here; `bgp4.cli` imports them and registers their commands on the app, so this module
imports none of them (no cycle).

Library errors become one line on stderr: exit code 2 for bad input (`InputError`), 1 for
other failures (`Bgp4Error`), 130 after Ctrl-C. No traceback for user mistakes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import typer

from bgp4 import __version__
from bgp4.errors import Bgp4Error, InputError
from bgp4.settings import TrainSettings

__all__ = ["DEFAULT_DATA", "app", "default_of", "handles_errors"]


def default_of(settings: type, name: str):
    """The default of field `name` of a settings dataclass: the one source of every CLI default."""
    return settings.__dataclass_fields__[name].default


#: Where `bgp4 simulate` writes and `bgp4 train` / `bgp4 analyze` read by default.
DEFAULT_DATA = Path(default_of(TrainSettings, "data"))

app = typer.Typer(
    help="Boltzmann generators for peptides (alanine dipeptide and beyond) with P4Inv invertible linear layers.",
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
    threads: int | None = typer.Option(
        None,
        "--threads",
        min=1,
        help=(
            "torch threads of this command (default: torch's, one per core). Give 1 to each of several"
            " runs that share the cores, before the command: bgp4 --threads 1 train ... (a sweep's runs take"
            " --threads-per-run instead)"
        ),
    ),
) -> None:
    """Boltzmann generators for peptides (alanine dipeptide and beyond) with P4Inv invertible linear layers."""
    if threads is not None:
        import torch  # here, not at the top: `bgp4 --help` stays fast

        torch.set_num_threads(threads)
