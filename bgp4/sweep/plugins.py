"""Dask worker plugins of a sweep and the stop check its tasks poll.

`IgnoreInterrupts` keeps Ctrl-C from closing local workers mid-step, `TrainerCache` keeps the runs a
worker process trained ready for their next part, and `stop_asked` watches the sweep's stop event.
The client registers the plugins (`bgp4.sweep.cluster`); the tasks use them (`bgp4.sweep.tasks`).
"""

from __future__ import annotations

import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

__all__ = ["IgnoreInterrupts", "TrainerCache", "trainer_cache", "stop_asked", "STOP_POLL_S", "CACHED_RUNS"]

#: Runs a worker process keeps ready (each holds its training frames in flow coordinates:
#: about 0.2 GB per million frames).
CACHED_RUNS = 8
#: Seconds between two looks at the sweep's stop event (each look asks the scheduler).
STOP_POLL_S = 2.0
#: Seconds without an answer about the stop event after which a run stops as if asked.
STOP_LOST_S = 30.0


def stop_asked(event: str | None) -> Callable[[], bool]:
    """A check that turns true once the Dask Event `event` is set (asked every STOP_POLL_S at most).

    The sweep command sets it when it is interrupted, so that training runs, which see no
    signals in a worker's thread, save a checkpoint at their next step instead of losing the
    steps since the last one.
    """
    return (lambda: False) if event is None else _EventWatch(event)


class _EventWatch:
    """Callable: whether a Dask Event is set, asking the scheduler at most every STOP_POLL_S;
    true for good once it was, or once the scheduler has not answered for STOP_LOST_S."""

    def __init__(self, name: str):
        from distributed import Event

        self.event = Event(name)
        self.set = False
        self.asked_at = -STOP_POLL_S
        self.failing_since: float | None = None

    def __call__(self) -> bool:
        now = time.monotonic()
        if self.set or now - self.asked_at < STOP_POLL_S:
            return self.set
        self.asked_at = now
        try:
            self.set, self.failing_since = self.event.is_set(), None
        except Exception as error:  # noqa: BLE001 - a transient RPC error, or the scheduler is gone
            self.failing_since = self.failing_since or now
            if now - self.failing_since >= STOP_LOST_S:  # gone: save the run while it can
                print(f"no answer from the scheduler for {STOP_LOST_S:.0f} s ({error}); stopping", flush=True)
                self.set = True
        return self.set


class IgnoreInterrupts(WorkerPlugin):
    """Makes a local worker process ignore SIGINT.

    The workers of a LocalCluster share the terminal's process group, so Ctrl-C reaches them
    too and would close them mid-step, before their run saves a checkpoint. The sweep command
    handles Ctrl-C for them: it sets the stop event that `stop_asked` watches. (SIGTERM sent to
    the whole process group, as a batch system may do, still ends the workers at once; runs then
    resume from their last periodic checkpoint.)
    """

    name = "bgp4-ignore-interrupts"

    def setup(self, worker: Any) -> None:
        if threading.current_thread() is threading.main_thread():  # the worker's event loop, as a rule
            signal.signal(signal.SIGINT, signal.SIG_IGN)


class TrainerCache(WorkerPlugin):
    """The Trainers of the last CACHED_RUNS runs a worker process trained a part of.

    A part taken from here skips loading the data, mapping it to flow coordinates and compiling
    (seconds to a minute): it goes on from the run's checkpoint, without even reading it when this
    Trainer wrote it. A Trainer is taken out while a
    task uses it, so two tasks never share one; a task that fails does not put it back.
    """

    name = "bgp4-trainers"

    def setup(self, worker: Any) -> None:  # on the worker: the plugin travels there unpickled, and empty
        self.trainers: OrderedDict[str, Any] = OrderedDict()
        self.lock = threading.Lock()

    def take(self, key: str) -> Any | None:
        with self.lock:
            return self.trainers.pop(key, None)

    def put(self, key: str, trainer: Any) -> None:
        """Keep `trainer`; let go of the oldest beyond CACHED_RUNS and of runs finished elsewhere."""
        with self.lock:
            evicted = [self.trainers.pop(key)] if key in self.trainers else []
            self.trainers[key] = trainer
            evicted += [self.trainers.pop(k) for k, t in list(self.trainers.items()) if t.run.complete]
            evicted += [self.trainers.popitem(last=False)[1] for _ in range(len(self.trainers) - CACHED_RUNS)]
        for old in evicted:
            old.close()

    def teardown(self, worker: Any) -> None:
        with self.lock:
            trainers, self.trainers = list(self.trainers.values()), OrderedDict()
        for trainer in trainers:
            trainer.close()


def trainer_cache() -> TrainerCache | None:
    """This worker's TrainerCache; None outside a worker or where none was registered."""
    try:
        from distributed import get_worker

        return get_worker().plugins.get(TrainerCache.name)
    except ValueError:  # not in a worker
        return None
