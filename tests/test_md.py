"""The MD stage: files, physics, resume after a kill, refusal of bad input."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import mdtraj
import numpy as np
import openmm
import pytest

from bgp4.errors import InputError
from bgp4.simulation.data import load_trajectory, read_settings
from bgp4.simulation.md import STATE_FILE, MDSettings, simulate


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("md") / "short.h5"
    settings = MDSettings(frames=1501, equilibration_ps=2.0, replicas=2, seed=7)
    simulate(out, settings, progress=False)
    return out, settings


def test_short_run_file_loads_with_settings(short_run, molecule):
    out, settings = short_run
    traj = mdtraj.load(str(out))
    assert traj.n_frames == 1501 and traj.n_atoms == 22
    stored = read_settings(out)
    assert stored["temperature"] == 600.0 and stored["replicas"] == 2
    assert stored["force_field"] == ["amber99sbildn.xml", "amber96_obc.xml"]
    assert len(stored["replica_seeds"]) == 2 and stored["replica_seeds"][0] != stored["replica_seeds"][1]
    data = load_trajectory(out, 22, extras=("replica",))
    assert np.bincount(data.extras["replica"]).tolist() == [751, 750]
    assert np.unique(data.xyz.reshape(1501, -1), axis=0).shape[0] == 1501
    # the file names its molecule, and every later stage looks it up from there
    assert stored["molecule"] == molecule.name and data.molecule().name == molecule.name


def test_stored_energies_match_openmm(short_run, molecule):
    out, _ = short_run
    data = load_trajectory(out, 22)
    context = openmm.Context(
        molecule.system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference")
    )
    for i in range(0, data.n_frames, 150):
        context.setPositions(data.xyz[i].astype(np.float64))
        fresh = context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole)
        assert data.energies[i] == pytest.approx(fresh, abs=0.05)


def test_kinetic_temperature_near_target(short_run):
    out, _ = short_run
    with mdtraj.formats.HDF5TrajectoryFile(str(out)) as f:
        temperature = f.read().temperature
    assert abs(np.mean(temperature) - 600.0) < 30.0


def test_same_seed_same_frames(tmp_path):
    settings = MDSettings(frames=40, equilibration_ps=0.2, replicas=1, seed=3)
    a = simulate(tmp_path / "a.h5", settings, progress=False)
    b = simulate(tmp_path / "b.h5", settings, progress=False)
    assert np.array_equal(load_trajectory(a).xyz, load_trajectory(b).xyz)


def _cli(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bgp4.cli", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.slow
def test_resume_after_sigkill_gives_exact_frames(tmp_path):
    out = tmp_path / "run.h5"
    args = ("simulate", "--out", str(out), "--frames", "30000", "--replicas", "2", "--equilibration-ps", "1", "--quiet")
    proc = _cli(*args, cwd=tmp_path)
    state = tmp_path / "run.h5.partial" / STATE_FILE.format(0)
    deadline = time.time() + 120
    while time.time() < deadline:
        if state.exists() and json.loads(state.read_bytes().partition(b"\n")[0])["frames"] >= 2000:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists()
    finished = _cli(*args, cwd=tmp_path)
    _, err = finished.communicate(timeout=300)
    assert finished.returncode == 0, err
    data = load_trajectory(out, 22, extras=("replica",))
    assert data.n_frames == 30000
    assert np.bincount(data.extras["replica"]).tolist() == [15000, 15000]
    assert np.unique(data.xyz.reshape(30000, -1), axis=0).shape[0] == 30000
    assert not (tmp_path / "run.h5.partial").exists()


def test_partial_run_with_other_settings_is_refused(tmp_path):
    out = tmp_path / "p.h5"
    work = tmp_path / "p.h5.partial"
    work.mkdir()
    (work / "settings.json").write_text(json.dumps({"frames": 99, "temperature": 300.0}))
    with pytest.raises(InputError, match="other settings"):
        simulate(out, MDSettings(frames=10, equilibration_ps=0.1, replicas=1), progress=False)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--frames", "0"], "--frames"),
        (["--temperature", "-5"], "--temperature"),
        (["--platform", "Nope"], "unknown platform"),
        (["--save-every", "0"], "--save-every"),
        (["--molecule", "benzene"], "unknown molecule"),
    ],
)
def test_bad_input_is_refused_cleanly(tmp_path, args, message):
    out = tmp_path / "bad.h5"
    proc = _cli("simulate", "--out", str(out), *args, cwd=tmp_path)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert message in stderr and "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1
    assert not out.exists() and not (tmp_path / "bad.h5.partial").exists()


def test_finished_file_is_not_overwritten(tmp_path):
    out = tmp_path / "done.h5"
    out.write_bytes(b"precious")
    proc = _cli("simulate", "--out", str(out), "--frames", "5", cwd=tmp_path)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "--overwrite" in stderr
    assert out.read_bytes() == b"precious"


def test_unwritable_path_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError):
        simulate(blocker / "sub" / "x.h5", MDSettings(frames=5), progress=False)


def test_finished_file_is_complete_with_the_same_settings_and_refused_with_others(short_run, cli):
    from dataclasses import replace

    from bgp4.simulation.md import completed

    out, settings = short_run
    stamp = out.stat().st_mtime_ns
    assert completed(out, settings)
    assert completed(out, replace(settings, replicas=0))  # one per core: whatever the cores were
    assert simulate(out, settings, progress=False) == out and out.stat().st_mtime_ns == stamp
    with pytest.raises(InputError, match=r"other settings \(temperature\).*--overwrite.*another --out"):
        completed(out, replace(settings, temperature=300.0))
    args = [
        "simulate",
        "--out",
        str(out),
        "--frames",
        "1501",
        "--equilibration-ps",
        "2",
        "--replicas",
        "2",
        "--seed",
        "7",
    ]
    result = cli(*args)
    assert result.returncode == 0 and "already complete" in result.stdout
    result = cli(*args, "--seed", "8")
    assert result.returncode == 2 and "other settings (seed)" in result.stderr and "--overwrite" in result.stderr
    assert out.stat().st_mtime_ns == stamp


def test_partial_run_keeps_its_replica_count_when_replicas_are_automatic(tmp_path):
    from bgp4.simulation.md import _prepare, _settings_record

    out = tmp_path / "p.h5"
    work = tmp_path / "p.h5.partial"
    work.mkdir()
    started = MDSettings(frames=10, replicas=3).resolved()  # begun on a machine with 3 cores
    (work / "settings.json").write_text(json.dumps(_settings_record(started)))
    _, resumed = _prepare(out, MDSettings(frames=10, replicas=0).resolved(), overwrite=False, auto_replicas=True)
    assert resumed.replicas == 3 and resumed.seeds() == started.seeds()
    with pytest.raises(InputError, match=r"other settings \(replicas\)"):
        _prepare(out, MDSettings(frames=10, replicas=2).resolved(), overwrite=False, auto_replicas=False)
