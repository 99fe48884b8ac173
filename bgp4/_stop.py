"""Stop a long loop at a step boundary on Ctrl-C or SIGTERM, so that its checkpoint is whole."""
from __future__ import annotations

import signal
import threading
from typing import Any

__all__ = ["StopRequest"]


class StopRequest:
    """Turns SIGINT/SIGTERM into a flag the loop checks between steps (main thread only).

    A checkpoint taken in the middle of a step would hold a half-applied update; waiting for
    the step boundary keeps a resumed run identical to an unbroken one. A second signal stops
    at once. Call `restore` when the loop ends.
    """

    def __init__(self):
        self.requested = False
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
