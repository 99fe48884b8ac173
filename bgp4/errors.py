"""Exceptions that the CLI turns into one-line messages.

`InputError` means the user asked for something impossible (exit code 2);
`Bgp4Error` is any other failure the library reports cleanly (exit code 1).
"""

__all__ = ["Bgp4Error", "InputError"]


class Bgp4Error(Exception):
    """A failure that the CLI reports as one line on stderr (exit code 1)."""


class InputError(Bgp4Error, ValueError):
    """Bad input from the user: a path, a value or a file that cannot be used (exit code 2)."""
