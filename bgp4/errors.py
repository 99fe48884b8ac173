"""Exceptions that the CLI turns into one-line messages.

`InputError` means the user asked for something impossible (exit code 2);
`Bgp4Error` is any other failure the library reports cleanly (exit code 1).
"""

import dataclasses
import math
from collections.abc import Callable
from typing import Any

__all__ = ["Bgp4Error", "InputError", "first_line", "refuse_non_finite"]


class Bgp4Error(Exception):
    """A failure that the CLI reports as one line on stderr (exit code 1)."""


class InputError(Bgp4Error, ValueError):
    """Bad input from the user: a path, a value or a file that cannot be used (exit code 2)."""


def first_line(error: BaseException, limit: int = 200, typed: bool = False) -> str:
    """The first line of an exception's message, cut to `limit` characters: the one-line reason a
    message quotes. Without a message, its type's name; `typed` puts the type's name in front.

    >>> first_line(OSError("disk full\\nmore")), first_line(KeyError()), first_line(ValueError("bad"), typed=True)
    ('disk full', 'KeyError', 'ValueError: bad')
    """
    line = (str(error).strip().splitlines() or [""])[0][:limit]
    if typed:
        return f"{type(error).__name__}: {line}" if line else type(error).__name__
    return line or type(error).__name__


def _option(name: str) -> str:
    return f"{name} (--{name.replace('_', '-')})"


def refuse_non_finite(record: Any, named: Callable[[str], str] = _option) -> None:
    """Raise InputError for the first float field of the dataclass `record` that is inf or nan:
    range checks (`not value > 0`) let inf through, and a run would write nonsense with it.

    >>> from bgp4.settings import TrainSettings
    >>> refuse_non_finite(TrainSettings(energy_lr=float("inf")))
    Traceback (most recent call last):
    ...
    bgp4.errors.InputError: energy_lr (--energy-lr) must be a finite number, got inf
    """
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"{named(field.name)} must be a finite number, got {value}")
