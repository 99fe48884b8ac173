"""One process per output: a second bgp4 process on the same output is refused, a killed one frees it."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from bgp4._io import exclusive
from bgp4.errors import InputError
from tests._cli_helpers import _one_line_error

HOLD = (
    "import sys, time\nfrom bgp4._io import exclusive\n"
    "with exclusive(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(60)\n"
)


def test_a_second_holder_is_refused_by_the_resolved_path_and_the_lock_is_freed_after(tmp_path):
    out = tmp_path / "run"
    with exclusive(out):
        with pytest.raises(InputError, match=r"in use by bgp4 process \d+"):
            with exclusive(tmp_path / "sub" / ".." / "run"):
                pass
    with exclusive(out):
        pass
    assert list(tmp_path.iterdir()) == []  # nothing beside the output


def test_a_killed_holder_frees_the_lock(tmp_path):
    out = tmp_path / "data.h5"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(InputError, match=f"bgp4 process {holder.pid}"):
            with exclusive(out):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with exclusive(out):
        pass


@pytest.mark.parametrize(
    "command",
    [
        ["simulate", "--out", "{out}", "--frames", "5"],
        ["train", "--data", "md.h5", "--out", "{out}", "--steps", "2"],
        ["sample", "run", "--out", "{out}", "--n", "4"],
        ["pipeline", "--out", "{out}"],
        ["sweep", "--data", "md.h5", "--out", "{out}"],
    ],
    ids=lambda c: c[0],
)
def test_each_writing_command_refuses_an_output_in_use_and_writes_nothing(tmp_path, cli, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / ("out.h5" if command[0] in ("simulate", "sample") else "out")
    with exclusive(out):
        result = cli(*[a.format(out=out) for a in command])
    assert "is in use by bgp4 process" in _one_line_error(result)
    assert list(tmp_path.iterdir()) == []
