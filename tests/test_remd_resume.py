"""Replica exchange resumed: after Ctrl-C, SIGTERM or SIGKILL, shorter or longer; bad input refused."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import mdtraj
import numpy as np
import pytest
from _remd_helpers import TINY

from bgp4.errors import InputError
from bgp4.simulation import _remd_segments as segments
from bgp4.simulation import remd
from bgp4.simulation.data import load_trajectory, read_settings
from bgp4.simulation.md import simulate


def _interrupt_after(iterations: int):
    """An `_advance` that runs the segments before the second one whole, then stops (as Ctrl-C
    would) `iterations` into the second."""
    advance, calls = remd._advance, []

    def run(sampler, bar, stop=None):
        calls.append(1)
        if len(calls) == 1:
            return advance(sampler, bar, stop)
        for _ in range(iterations):
            sampler.run(1)
        raise KeyboardInterrupt

    return run


@pytest.mark.slow
@pytest.mark.parametrize("damage", [False, True], ids=["from-checkpoint", "damaged-storage"])
def test_interrupted_run_resumes_to_the_frames_asked_for(tmp_path, monkeypatch, capsys, damage):
    monkeypatch.setattr(segments, "SEGMENT_ITERATIONS", 20)
    settings = replace(TINY, frames=50, equilibration_ps=0.0)
    out, work = tmp_path / "cut.h5", tmp_path / "cut.h5.partial"
    with monkeypatch.context() as patch:
        patch.setattr(remd, "_advance", _interrupt_after(13))
        with pytest.raises(KeyboardInterrupt):
            simulate(out, settings, progress=False)
    assert not out.exists() and (work / "segment-0000" / "done.json").exists()
    assert not (work / "segment-0001" / "done.json").exists()
    with pytest.raises(InputError, match="partial run"):
        simulate(out, replace(settings, seed=6), progress=False)
    if damage:  # as a kill in the middle of an HDF5 write may leave it
        (work / "segment-0001" / "remd.nc").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(4000))
    opened, sealed, reporter, seal = [], [], segments.reporter, segments.seal_at_checkpoint

    def reporting(directory, n_atoms, mode=None):
        opened.append((directory.name, mode))
        return reporter(directory, n_atoms, mode)

    def sealing(directory, n_atoms):
        kept = seal(directory, n_atoms)
        sealed.append((directory.name, kept and json.loads((directory / segments.SEGMENT_INFO).read_text())))
        return kept

    monkeypatch.setattr(segments, "reporter", reporting)
    monkeypatch.setattr(segments, "seal_at_checkpoint", sealing)
    simulate(out, settings, progress=True)
    err = capsys.readouterr().err
    assert ("does not open" in err) == damage and "50/50" in err  # the bar counts a sealed segment too
    # a cut segment is read, never written again (a file killed mid-write may fail on its next write):
    # stopped after iteration 13 of 20, it is sealed at its checkpoint 10, and the next one starts there
    assert sealed == [("segment-0001", 0 if damage else {"start": 20, "iterations": 10})]
    assert (("segment-0001", None) in opened) == damage  # a damaged one is made again
    data = load_trajectory(out, extras=("walker",))
    assert data.n_frames == 50 and not work.exists()
    assert np.allclose(mdtraj.load(str(out)).time, np.arange(1, 51) * 0.02)
    assert np.unique(data.xyz.reshape(50, -1), axis=0).shape[0] == 50
    assert sum(read_settings(out)["exchange_attempts"]) > 0


@pytest.mark.slow
def test_a_partial_run_resumes_shorter_or_longer(tmp_path, monkeypatch):
    """Cut in its second segment, a 50-frame run resumed with 15 frames keeps the first 15 (those
    of a fresh 15-frame run: the first segment was sealed unbroken); resumed with 65 it goes on
    past the 50 it was started with (segments end on checkpoints: 20, the cut one sealed at its
    checkpoint 10, then 20 and 20)."""
    monkeypatch.setattr(segments, "SEGMENT_ITERATIONS", 20)
    settings = replace(TINY, frames=50, equilibration_ps=0.0)
    for frames in (15, 65):
        out, work = tmp_path / f"to-{frames}.h5", tmp_path / f"to-{frames}.h5.partial"
        with monkeypatch.context() as patch:
            patch.setattr(remd, "_advance", _interrupt_after(13))
            with pytest.raises(KeyboardInterrupt):
                simulate(out, settings, progress=False)
        simulate(out, replace(settings, frames=frames), progress=False)
        data = load_trajectory(out)
        assert data.n_frames == frames and not work.exists()
        assert read_settings(out)["frames"] == read_settings(out)["iterations"] == frames
        assert np.allclose(mdtraj.load(str(out)).time, np.arange(1, frames + 1) * 0.02)
        assert np.unique(data.xyz.reshape(frames, -1), axis=0).shape[0] == frames
    fresh = tmp_path / "fresh-15.h5"
    simulate(fresh, replace(settings, frames=15), progress=False)
    np.testing.assert_array_equal(load_trajectory(tmp_path / "to-15.h5").xyz, load_trajectory(fresh).xyz)
    assert segments.size(5) == 10 and segments.size(25) == 20  # a checkpoint at every end


def test_sigterm_in_a_storage_write_stops_between_iterations_and_resumes(tmp_path, monkeypatch):
    """openmmtools defers a signal that arrives while it writes an iteration, then calls the handler
    it replaced; SIGTERM's default one is not callable there, so the run holds a Python handler: the
    run stops after that iteration (KeyboardInterrupt, what the CLI turns into exit code 130) and
    resumes to the frames asked for."""
    import os
    import signal

    from bgp4.simulation._remd_storage import SegmentReporter

    settings = replace(TINY, frames=30, equilibration_ps=0.0)
    out, calls = tmp_path / "term.h5", []
    stamp = SegmentReporter.write_timestamp

    def stamp_and_signal(self, iteration):
        calls.append(iteration)
        if len(calls) == 12:
            os.kill(os.getpid(), signal.SIGTERM)  # inside openmmtools' delayed-termination block
        return stamp(self, iteration)

    before = signal.getsignal(signal.SIGTERM)
    with monkeypatch.context() as patch:
        patch.setattr(SegmentReporter, "write_timestamp", stamp_and_signal)
        with pytest.raises(KeyboardInterrupt):
            simulate(out, settings, progress=False)
    assert signal.getsignal(signal.SIGTERM) is before and not out.exists()
    simulate(out, settings, progress=False)
    assert load_trajectory(out).n_frames == 30


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--replica-exchange", "600:300:4", "--temperature", "600"], "must increase"),
        (["--replica-exchange", "300:300:4", "--temperature", "300"], "must increase"),
        (["--replica-exchange", "300-600-8", "--temperature", "300"], "TMIN:TMAX:N"),
        (["--replica-exchange", "300:600:eight", "--temperature", "300"], "TMIN:TMAX:N"),
        (["--replica-exchange", "300:600:1", "--temperature", "300"], "at least 2"),
        (["--replica-exchange", "300:600:8"], "temperature (--temperature) is 600 K"),
        (["--replica-exchange", "300:600:8", "--temperature", "300", "--replicas", "2"], "--replicas"),
        (["--replica-exchange", "300:600:8", "--temperature", "300", "--constraints", "none", "--timestep-fs", "2"],
         "too long"),
        (["--velocity-refresh", "exchange"], "is for replica exchange"),
        (["--replica-exchange", "300:600:8", "--temperature", "300", "--velocity-refresh", "never"],
         "must be iteration or exchange"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_code_2_with_nothing_written(tmp_path, cli, flags, message):
    out = tmp_path / "bad.h5"
    done = cli("simulate", "--out", out, "--frames", "10", *flags)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def _partial_iterations(work: Path) -> int:
    """Iterations that sealed segments hold (read from their markers)."""
    return sum(json.loads(p.read_text())["iterations"] for p in work.glob("segment-*/done.json"))


@pytest.mark.slow
def test_resume_after_sigkill_keeps_sealed_segments_and_ends_with_the_frames_asked_for(tmp_path):
    out, work = tmp_path / "kill.h5", tmp_path / "kill.h5.partial"
    args = [sys.executable, "-m", "bgp4.cli", "simulate", "--out", str(out), "--frames", "1500", "--quiet"]
    args += ["--temperature", "300", "--replica-exchange", "300:600:3", "--save-every", "10"]
    args += ["--equilibration-ps", "0.1", "--constraints", "none"]
    proc = subprocess.Popen(args, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while _partial_iterations(work) < 1000 and proc.poll() is None:
        assert time.time() < deadline, "the first segment was not sealed within 300 s"
        time.sleep(0.05)
    time.sleep(np.random.default_rng(0).uniform(0.0, 1.0))  # somewhere in the next segment
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists() and _partial_iterations(work) >= 1000
    finished = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    data = load_trajectory(out)
    assert data.n_frames == 1500 and not work.exists()
    assert np.allclose(mdtraj.load(str(out)).time, np.arange(1, 1501) * 0.01)
    # the sealed first segment is kept as it was; the rest is a valid continuation, not the same
    # numbers (openmmtools reseeds its streams on resume: docs/design/resume.md)
    unbroken = tmp_path / "unbroken.h5"
    done = subprocess.run([*args[:5], str(unbroken), *args[6:]], cwd=tmp_path, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(data.xyz[:1000], load_trajectory(unbroken).xyz[:1000])
