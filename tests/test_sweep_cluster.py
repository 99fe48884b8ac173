"""Sweeps' Dask clusters: the scheduler wait, local workers' memory and environment, workers started elsewhere."""

from __future__ import annotations

import os
import sys

import pytest

from bgp4.errors import InputError


def test_the_wait_for_a_scheduler_is_bounded_by_the_connect_timeout(monkeypatch):
    import contextlib

    import distributed

    from bgp4.sweep import cluster

    waits = []

    def silent(address, timeout):
        waits.append(("socket", timeout))
        raise TimeoutError("timed out")

    monkeypatch.setattr(cluster.socket, "create_connection", silent)
    with pytest.raises(InputError, match=f"within {cluster.CONNECT_TIMEOUT_S} s"):
        with cluster.open_client("tcp://somewhere:8786", 1):
            pass
    monkeypatch.setattr(cluster.socket, "create_connection", lambda address, timeout: contextlib.nullcontext())

    def not_a_scheduler(address, timeout):
        waits.append(("client", timeout))
        raise OSError("the handshake timed out")

    monkeypatch.setattr(distributed, "Client", not_a_scheduler)
    with pytest.raises(InputError, match="no Dask scheduler answered"):
        with cluster.open_client("tcp://somewhere:8786", 1):
            pass
    # each wait is bounded by the timeout, under the 15 s the CLI promises: an address nobody answers
    # fails at the socket, one that answers but is no scheduler at the client
    assert waits == [("socket", cluster.CONNECT_TIMEOUT_S), ("client", cluster.CONNECT_TIMEOUT_S)]
    assert cluster.CONNECT_TIMEOUT_S < 15


@pytest.mark.slow
def test_local_cluster_workers_keep_glibc_memory_trimming(monkeypatch):
    """Dask's nanny would set MALLOC_TRIM_THRESHOLD_=65536, which made FAB steps 3x slower; the
    thread limits it sets stay."""
    from bgp4.sweep.cluster import open_client

    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    with open_client(None, 1) as client:
        seen = list(
            client.run(lambda: {k: os.environ.get(k) for k in ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS")}).values()
        )
    assert seen == [{"MALLOC_TRIM_THRESHOLD_": None, "OMP_NUM_THREADS": "1"}]


def _http_host(dask_scheduler) -> str:
    """The address the scheduler's HTTP server listens on (run on the scheduler)."""
    return dask_scheduler.http_server.address


@pytest.mark.slow
def test_two_local_clusters_at_once_print_nothing(capfd):
    """Two sweeps on one machine: the second's scheduler does not warn that port 8787 is taken, and
    each scheduler's HTTP server listens on this machine only."""
    import warnings

    from bgp4.sweep.cluster import open_client

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with open_client(None, 1) as first, open_client(None, 1) as second:
            assert first.submit(sum, [1, 2]).result() == 3 and second.submit(sum, [3, 4]).result() == 7
            where = [c.run_on_scheduler(_http_host) for c in (first, second)]
            assert where == ["127.0.0.1", "127.0.0.1"]
    assert not [str(w.message) for w in caught if "in use" in str(w.message)]
    assert capfd.readouterr().err == ""


def test_local_workers_get_a_share_of_the_memory_available_at_least_the_floor(monkeypatch):
    import psutil

    from bgp4.sweep import cluster

    available = type("Memory", (), {"available": 40 * 2**30})
    monkeypatch.setattr(psutil, "virtual_memory", lambda: available)
    assert cluster.local_memory_limit(2) == int(0.8 * 40 * 2**30 / 2)
    assert cluster.local_memory_limit(64) == int(cluster.MIN_WORKER_GIB * 2**30)
    assert cluster.local_memory_limit(2, 3.5) == int(3.5 * 2**30)
    assert cluster.local_memory_limit(2, 0) == 0  # no limit
    for bad in (-1, 0.001, float("nan"), float("inf")):
        with pytest.raises(InputError, match="--worker-memory"):
            cluster.local_memory_limit(2, bad)


@pytest.mark.slow
def test_a_local_worker_over_its_memory_limit_is_restarted_and_says_so(capfd):
    """A runaway worker is restarted by its nanny (a sweep's task then resumes in a fresh worker),
    with one warning line, instead of growing until the kernel kills it."""
    import dask
    from distributed import KilledWorker

    from bgp4.sweep.cluster import open_client

    def _hold_memory(gib: float, seconds: float) -> int:  # nested: Dask sends it by value
        import time

        import numpy as np

        held = np.ones(int(gib * 2**27))  # float64: touched, so resident
        time.sleep(seconds)
        return held.size

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):  # no rerun: one restart
        with open_client(None, 1, memory_limit=600 * 2**20) as client:
            # no pausing or spilling: a paused worker holding its cached runs would stall the sweep
            settings = client.run(lambda dask_worker: dask_worker.memory_manager.memory_pause_fraction)
            assert list(settings.values()) == [False]
            with pytest.raises(KilledWorker):
                client.submit(_hold_memory, 1.5, 10.0, pure=False).result()
            assert client.submit(_hold_memory, 0.01, 0.0, pure=False).result() > 0  # a fresh worker
    lines = [line for line in capfd.readouterr().err.splitlines() if "memory budget" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: Worker tcp://") and "--worker-memory" in lines[0]


def test_a_failed_run_says_why_in_one_line_and_names_the_memory_limit_when_its_workers_died():
    from distributed import KilledWorker

    from bgp4.sweep.dispatch import failure_reason

    assert failure_reason(ValueError("bad value\nmore detail")) == "bad value"
    assert failure_reason(RuntimeError()) == "RuntimeError"
    died = failure_reason(KilledWorker("train-abc", "tcp://127.0.0.1:1234", 3))
    assert "died each time" in died and "--worker-memory" in died and "\n" not in died


@pytest.mark.slow
def test_workers_started_elsewhere_with_the_trim_threshold_get_one_warning(capsys):
    """Workers that a user starts with a nanny keep its MALLOC_TRIM_THRESHOLD_: the sweep says so."""
    from distributed import LocalCluster

    from bgp4.sweep.cluster import open_client, trim_threshold_warning

    assert trim_threshold_warning({"tcp://a": None}) is None
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0", memory_limit=0) as cluster:
        with open_client(cluster.scheduler_address, 1):
            pass
    lines = [line for line in capsys.readouterr().err.splitlines() if "MALLOC_TRIM_THRESHOLD_" in line]
    assert lines == [
        "warning: 1 of 1 Dask workers run with MALLOC_TRIM_THRESHOLD_ set (the nanny's default), "
        "which made FAB steps 3x slower; start them with `dask worker ... --no-nanny`"
    ]


@pytest.mark.slow
@pytest.mark.skipif(sys.version_info < (3, 11), reason="python -P (the cwd off sys.path) is 3.11+")
def test_a_missing_data_file_is_simulated_by_this_bgp4_in_a_child(tmp_path, monkeypatch):
    from bgp4.simulation.data import load_trajectory, read_settings
    from bgp4.sweep.tasks import simulate_task

    decoy = tmp_path / "bgp4"  # a package named bgp4 in the cwd must not be the one the child runs
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('the wrong bgp4')\n")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "data" / "ala2.h5"
    out.parent.mkdir()
    md = {"frames": 40, "equilibration_ps": 0.1, "replicas": 1, "seed": 2}
    assert simulate_task(str(out), md) == str(out)
    assert load_trajectory(out).n_frames == 40 and read_settings(out)["seed"] == 2
    assert "bgp4 simulate --frames 40" in (out.parent / "ala2.h5.log.txt").read_text()
    assert simulate_task(str(out), md) == str(out)  # done: kept
