"""A daemon thread that records this process's resident memory (GiB) every second."""

import threading
import time

import psutil

__all__ = ["start_trace"]


def start_trace() -> list[float]:
    """The list the thread appends to, one reading a second, from now on."""
    trace: list[float] = []

    def watch() -> None:
        process = psutil.Process()
        while True:
            trace.append(process.memory_info().rss / 2**30)
            time.sleep(1)

    threading.Thread(target=watch, daemon=True).start()
    return trace
