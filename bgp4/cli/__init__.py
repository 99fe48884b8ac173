"""The `bgp4` command line: one thin command per stage; the numerics live in the library.

Library errors become one line on stderr: exit code 2 for bad input (`InputError`), 1 for
other failures (`Bgp4Error`), 130 after Ctrl-C. No traceback for user mistakes.

The app and its error handling live in `bgp4.cli._app`, the commands in one module per stage
(`md`, `training`, `sampling`, `sweeps`); they are registered here, in the order `bgp4 --help` lists them.
"""

from __future__ import annotations

from typing import Optional

from bgp4.cli._app import DEFAULT_DATA, app, handles_errors
from bgp4.cli.md import merge, simulate
from bgp4.cli.sampling import analyze, sample
from bgp4.cli.sweeps import pipeline, sweep
from bgp4.cli.training import train

__all__ = ["DEFAULT_DATA", "app", "handles_errors", "main"]

for _command in (simulate, merge, train, sample, analyze, pipeline, sweep):
    app.command()(_command)


def main(argv: Optional[list[str]] = None) -> None:
    """Console-script entry point."""
    app(args=argv, prog_name="bgp4")
