"""Exceptions that the CLI turns into one-line messages.

`InputError` means the user asked for something impossible (exit code 2);
`Bgp4Error` is any other failure the library reports cleanly (exit code 1).
"""

__all__ = ["Bgp4Error", "InputError", "first_line"]


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
