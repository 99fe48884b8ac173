"""One process per output: a second bgp4 process on the same output is refused, a killed one frees it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from bgp4._io import exclusive
from bgp4.errors import InputError
from tests._cli_helpers import _one_line_error

HOLD = (
    "import sys, time\nfrom bgp4._io import exclusive\n"
    "with exclusive(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(60)\n"
)


@pytest.fixture
def lock_tmp(tmp_path_factory, monkeypatch):
    """A temporary directory of the test's own for the lock folder (this process and its children)."""
    folder = tmp_path_factory.mktemp("tmpdir")
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


def test_a_second_holder_is_refused_by_the_resolved_path_and_the_lock_is_freed_after(tmp_path, lock_tmp):
    out = tmp_path / "run"
    with exclusive(out):
        with pytest.raises(InputError, match=rf"in use by bgp4 process {os.getpid()}"):
            with exclusive(tmp_path / "sub" / ".." / "run"):
                pass
        with exclusive(tmp_path / "other"):  # another output is free
            pass
    with exclusive(out):
        pass
    assert list(tmp_path.iterdir()) == []  # nothing beside the output


def test_a_killed_holder_frees_the_lock(tmp_path, lock_tmp):
    out = tmp_path / "data.h5"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not any(lock_tmp.glob("bgp4-locks-*/*.pid")):
            if holder.poll() is not None or time.monotonic() > deadline:
                why = holder.stderr.read() if holder.poll() is not None else "timed out"
                pytest.fail(f"the holder did not take the lock: {why}")
            time.sleep(0.05)
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(InputError, match=f"bgp4 process {holder.pid}"):
            with exclusive(out):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with exclusive(out):
        pass


def test_a_lock_folder_that_others_may_write_is_refused(lock_tmp):
    folder = lock_tmp / f"bgp4-locks-{os.getuid()}"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    with pytest.raises(InputError, match="only it may write"):
        with exclusive(lock_tmp / "out"):
            pass


@pytest.mark.parametrize(
    "command",
    [
        ["simulate", "--out", "{out}", "--frames", "5"],
        ["merge", "{out}", "a.h5", "b.h5"],
        ["train", "--data", "md.h5", "--out", "{out}", "--steps", "2"],
        ["sample", "{out}", "--n", "4"],  # no --out: the run's default samples file
        ["pipeline", "--out", "{out}"],
        ["sweep", "--data", "md.h5", "--out", "{out}"],
    ],
    ids=lambda c: c[0],
)
def test_writing_commands_refuse_an_output_in_use_and_write_nothing(tmp_path, lock_tmp, cli, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / ("out.h5" if command[0] in ("simulate", "merge") else "out")
    held = out / "samples.h5" if command[0] == "sample" else out
    with exclusive(held):
        result = cli(*[a.format(out=out) for a in command])
    assert "is in use by bgp4 process" in _one_line_error(result)
    assert list(tmp_path.iterdir()) == []


def test_a_pipeline_takes_the_locks_of_its_stages(tmp_path, lock_tmp, cli):
    out = tmp_path / "out"
    with exclusive(out / "data" / "ala2-600K.h5"):  # say a `bgp4 simulate --out` into the pipeline's data
        result = cli("pipeline", "--out", out, "--quiet")
    assert "ala2-600K.h5 is in use by bgp4 process" in result.stderr and result.returncode == 2
    assert list(tmp_path.iterdir()) == []
