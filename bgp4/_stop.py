"""Stop a long loop at a step boundary on Ctrl-C or SIGTERM, so that its checkpoint is whole."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["StopRequest"]


class StopRequest:
    """Turns SIGINT/SIGTERM into a flag the loop checks between steps (main thread only).

    A checkpoint taken in the middle of a step would hold a half-applied update; waiting for
    the step boundary keeps a resumed run identical to an unbroken one. A second signal stops
    at once. Call `restore` when the loop ends.

    `also` is a second source of stop requests, asked on every check: a loop that runs in a
    worker thread (a Dask task) sees no signals, so whoever started it asks it to stop this way.
    """

    def __init__(self, also: Callable[[], bool] | None = None):
        self._signalled = False
        self._also = also
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)

    @property
    def requested(self) -> bool:
        return self._signalled or (self._also is not None and self._also())

    def _handle(self, signum, frame) -> None:
        if self._signalled:
            raise KeyboardInterrupt
        self._signalled = True

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
