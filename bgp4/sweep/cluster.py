"""Dask clients for sweeps: a new LocalCluster sized to this machine, or an existing scheduler.

>>> with open_client(None, 2) as client:  # doctest: +SKIP
...     client.submit(sum, [1, 2]).result()
3
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any

from bgp4.errors import InputError, first_line
from bgp4.sweep.plugins import IgnoreInterrupts, TrainerCache

__all__ = [
    "CONNECT_TIMEOUT_S",
    "check_worker_memory",
    "local_cluster_size",
    "local_memory_limit",
    "open_client",
    "task_slots",
    "trim_threshold_warning",
]

#: Seconds to wait for a scheduler given with --scheduler (the CLI promises an answer within 15 s).
CONNECT_TIMEOUT_S = 10
#: The dask config key of the environment that a nanny gives the worker processes it starts.
PRE_SPAWN_ENVIRON = "distributed.nanny.pre-spawn-environ"
#: The variable a nanny sets that made FAB steps 3x slower in its workers (run/results/benchmark-300K).
TRIM_THRESHOLD = "MALLOC_TRIM_THRESHOLD_"
#: Share of the memory available when a local cluster starts that its workers may hold together.
MEMORY_SHARE = 0.8
#: The least default memory limit of a local worker, GiB: a refinement of 20,000 samples holds 2-5
#: GiB, and a worker keeps the runs it trained ready (`TrainerCache`, 0.2 GiB per million frames each).
MIN_WORKER_GIB = 4.0
#: The least limit --worker-memory takes, GiB (a worker's own start-up holds about 0.4).
LEAST_WORKER_GIB = 1.0
#: Memory settings of local workers: the nanny restarts a worker above 95 % of its limit. No
#: spilling, which a sweep's small task results never need, and no pausing: a paused worker keeps
#: its running task and its cached runs, so it would never fall back under the limit, and the sweep
#: would wait for it for good.
_LOCAL_MEMORY_CONFIG = {
    "distributed.worker.memory.target": False,
    "distributed.worker.memory.spill": False,
    "distributed.worker.memory.pause": False,
    "distributed.worker.memory.terminate": 0.95,
}


def local_cluster_size(n_tasks: int, threads_per_run: int, gpus_per_run: float, workers: int | None) -> int:
    """Workers of the default local cluster: one task each, workers x threads <= cores (and GPUs)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    size = max(1, cores // threads_per_run)
    if gpus_per_run > 0:
        import torch

        gpus = torch.cuda.device_count()
        if gpus == 0:
            raise InputError("gpus_per_run (--gpus-per-run) asks for GPUs, but torch sees none on this machine")
        size = min(size, max(1, int(gpus / gpus_per_run)))
    return max(1, workers if workers else min(size, n_tasks))


def local_memory_limit(n_workers: int, gib: float | None = None) -> int:
    """Bytes each of `n_workers` local workers may hold before its nanny restarts it (0: no limit).

    `gib` per worker as given (0 for none), or by default MEMORY_SHARE of the memory available now,
    shared among the workers, at least MIN_WORKER_GIB: a worker that runs away (a sweep worker once
    grew to 23 GB while refining) is then restarted, and its task resumes in a fresh process,
    before the machine starts to swap or thrash and stalls everything else on it.
    """
    if gib is not None:
        check_worker_memory(None, gib)
        return int(gib * 2**30)
    import psutil

    share = MEMORY_SHARE * psutil.virtual_memory().available / max(1, n_workers)
    return int(max(share, MIN_WORKER_GIB * 2**30))


def check_worker_memory(scheduler: str | None, gib: float | None, workers: int | None = None) -> None:
    """Refuse a --worker-memory (GiB) that is not 0 or a finite figure >= LEAST_WORKER_GIB, or one
    given with --scheduler, whose workers were started elsewhere with their own limits; and a
    --workers count below 0 (0 or None: the default), or one given with --scheduler."""
    if workers is not None and workers < 0:
        raise InputError(f"--workers must be 0 (the default size) or more, not {workers}")
    if workers and scheduler:
        raise InputError("--workers sizes a local cluster, not --scheduler's, whose workers were started elsewhere")
    if gib is None:
        return
    if scheduler:
        raise InputError("--worker-memory sets the limit of a local cluster's workers, not of --scheduler's")
    if not (gib == 0 or (math.isfinite(gib) and gib >= LEAST_WORKER_GIB)):
        raise InputError(f"--worker-memory must be 0 (no limit) or at least {LEAST_WORKER_GIB:g} GiB, not {gib}")


def trim_threshold_warning(per_worker: dict[str, str | None]) -> str | None:
    """A one-line warning when workers run with MALLOC_TRIM_THRESHOLD_ set (a nanny's default), or None.

    `per_worker` maps a worker's address to its value of the variable (None where unset).
    """
    slowed = sum(value is not None for value in per_worker.values())
    if not slowed:
        return None
    return (
        f"warning: {slowed} of {len(per_worker)} Dask workers run with {TRIM_THRESHOLD} set "
        "(the nanny's default), which made FAB steps 3x slower; start them with `dask worker ... --no-nanny`"
    )


def _trim_threshold() -> str | None:
    """This process's MALLOC_TRIM_THRESHOLD_ (run on each worker)."""
    return os.environ.get(TRIM_THRESHOLD)


def _reachable(address: str) -> None:
    """Fail at once where nothing listens at a tcp:// address (Dask itself retries until its timeout)."""
    from urllib.parse import urlsplit

    if not address.startswith("tcp://"):
        return
    parts = urlsplit(address)
    with socket.create_connection((parts.hostname, parts.port or 8786), timeout=CONNECT_TIMEOUT_S):
        pass


@contextlib.contextmanager
def open_client(
    scheduler: str | None, n_workers: int, gpus_per_run: float = 0.0, memory_limit: int = 0
) -> Iterator[Any]:
    """A `distributed.Client`: on `scheduler`, or on a new LocalCluster of `n_workers` processes,
    each restarted by its nanny above 95 % of `memory_limit` bytes (0: never)."""
    import logging

    import dask
    from distributed import Client, LocalCluster

    if scheduler:
        try:
            _reachable(scheduler)
            client = Client(scheduler, timeout=CONNECT_TIMEOUT_S)
        except Exception as error:  # noqa: BLE001 - refused, timed out, or something that is not a scheduler
            raise InputError(
                f"no Dask scheduler answered at {scheduler} within {CONNECT_TIMEOUT_S} s ({first_line(error, 120)})"
            ) from None
        with client:
            if warning := trim_threshold_warning(client.run(_trim_threshold)):
                print(warning, file=sys.stderr)
            _register(client, TrainerCache())
            try:
                if gpus_per_run > 0:
                    offered = [
                        w.get("resources", {}).get("GPU", 0) for w in client.scheduler_info()["workers"].values()
                    ]
                    if offered and max(offered) < gpus_per_run:
                        raise InputError(
                            f"no worker at {scheduler} offers {gpus_per_run} GPU(s); "
                            "start workers with --resources GPU=1"
                        )
                yield client
            finally:  # these workers outlive the sweep: they let go of the runs they keep ready
                with contextlib.suppress(Exception):
                    client.unregister_worker_plugin(TrainerCache.name)
        return
    resources = {"GPU": gpus_per_run} if gpus_per_run > 0 else None
    # Dask's nanny sets MALLOC_TRIM_THRESHOLD_=65536 in its workers: glibc then returns freed memory
    # at once, and the flow's many short-lived tensors fault their pages in again; FAB steps ran 3x
    # slower than in `bgp4 train` (run/results/benchmark-300K). The other variables stay.
    environ = {k: v for k, v in dask.config.get(PRE_SPAWN_ENVIRON, {}).items() if k != TRIM_THRESHOLD}
    with (
        dask.config.set({PRE_SPAWN_ENVIRON: environ, **_LOCAL_MEMORY_CONFIG}),
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.CRITICAL,
            memory_limit=memory_limit,
            resources=resources,
            # no dashboard; the scheduler's HTTP server (health checks) on a free port of this
            # machine only, where its default 8787 warns when another sweep's cluster has it
            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
        ) as cluster,
        Client(cluster) as client,
        _memory_restarts_shown(),
    ):
        _register(client, IgnoreInterrupts(), TrainerCache())
        yield client


@contextlib.contextmanager
def _memory_restarts_shown() -> Iterator[None]:
    """Show the one nanny message that silenced Dask logs would hide: a worker restarted for memory."""
    import logging

    logger = logging.getLogger("distributed.nanny.memory")
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(
        logging.Formatter("warning: %(message)s (its task resumes in a fresh worker; --worker-memory sets the limit)")
    )
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def _register(client: Any, *plugins: Any) -> None:
    register = getattr(client, "register_plugin", None) or client.register_worker_plugin  # distributed < 2023.9
    for plugin in plugins:
        register(plugin)


def task_slots(client: Any, gpus_per_run: float) -> int:
    """How many runs the client's workers hold at once: their threads (local workers have one
    each), or on GPU workers as many runs as their GPU resources allow; at least 1."""
    try:
        workers = client.scheduler_info(n_workers=-1)["workers"].values()  # all of them, not the first 5
    except TypeError:  # a version without the argument lists them all
        workers = client.scheduler_info()["workers"].values()
    slots = 0
    for worker in workers:
        threads = int(worker.get("nthreads", 1))  # a worker runs as many tasks at once as it has threads
        if gpus_per_run > 0:
            threads = min(threads, int(worker.get("resources", {}).get("GPU", 0) / gpus_per_run + 1e-9))
        slots += threads
    return max(1, slots)
