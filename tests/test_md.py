"""The MD stage: files, physics, resume after a kill, refusal of bad input."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mdtraj
import numpy as np
import openmm
import pytest
from _cli_helpers import start_cli

from bgp4.errors import Bgp4Error, InputError
from bgp4.simulation._records import STATE_FILE
from bgp4.simulation.data import load_trajectory, read_settings
from bgp4.simulation.md import MDSettings, simulate


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


@pytest.mark.slow
def test_same_seed_same_frames(tmp_path):
    settings = MDSettings(frames=40, equilibration_ps=0.2, replicas=1, seed=3)
    a = simulate(tmp_path / "a.h5", settings, progress=False)
    b = simulate(tmp_path / "b.h5", settings, progress=False)
    assert np.array_equal(load_trajectory(a).xyz, load_trajectory(b).xyz)


@pytest.mark.slow
def test_script_without_main_guard_simulates(tmp_path):
    """Replicas are `python -m` processes, so a plain script may call simulate at top level."""
    script = tmp_path / "script.py"
    script.write_text(
        "from bgp4.simulation.md import MDSettings, simulate\n"
        "simulate('s.h5', MDSettings(frames=60, equilibration_ps=0.1, replicas=2, seed=3), progress=False)\n"
        "print('script ran')\n"
    )
    repo = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("script ran") == 1  # the replicas did not run the script again
    assert load_trajectory(tmp_path / "s.h5").n_frames == 60


@pytest.mark.slow
def test_failed_replica_is_one_clear_error_and_a_rerun_resumes(tmp_path):
    out, work = tmp_path / "f.h5", tmp_path / "f.h5.partial"
    settings = MDSettings(frames=40, equilibration_ps=0.1, replicas=2, seed=3)
    (work / "replica-1.frames").mkdir(parents=True)  # replica 1 cannot open its records
    with pytest.raises(Bgp4Error, match=r"^MD replica 1 failed: IsADirectoryError.*rerun to resume$") as error:
        simulate(out, settings, progress=False)
    assert "replica 0" not in str(error.value)
    assert "Traceback" in (work / "replica-1.error.txt").read_text()
    (work / "replica-1.frames").rmdir()
    assert load_trajectory(simulate(out, settings, progress=False)).n_frames == 40
    assert not work.exists()


@pytest.mark.slow
def test_partial_run_resumes_shorter_as_a_fresh_run_of_that_length(tmp_path):
    settings = MDSettings(frames=40, equilibration_ps=0.1, replicas=2, seed=3, platform="Reference")
    fresh = load_trajectory(simulate(tmp_path / "fresh.h5", settings, progress=False))
    out, work = tmp_path / "r.h5", tmp_path / "r.h5.partial"
    (work / "replica-1.frames").mkdir(parents=True)  # replica 1 fails; replica 0 saves all 40 of its 80
    longer = dataclasses.replace(settings, frames=80)
    with pytest.raises(Bgp4Error, match="replica 1 failed"):
        simulate(out, longer, progress=False)
    (work / "replica-1.frames").rmdir()
    resized = load_trajectory(simulate(out, settings, progress=False))
    assert read_settings(out)["frames"] == 40 and not work.exists()
    np.testing.assert_array_equal(resized.xyz, fresh.xyz)


def _stat(pid: int | str) -> list[str]:
    """Fields of /proc/PID/stat after the command name: state, parent pid, ...; [] once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return []


def _alive(pid: int) -> bool:
    return _stat(pid)[:1] not in ([], ["Z"])  # a zombie has exited: it waits for a parent to reap it


def _children(pid: int) -> set[int]:
    """Live child processes of `pid` (Linux /proc)."""
    return {
        int(p.name) for p in Path("/proc").glob("[0-9]*") if _stat(p.name)[1:2] == [str(pid)] and _alive(int(p.name))
    }


def _wait_for_frames(work: Path, replicas: int, frames: int) -> None:
    """Until every replica has committed `frames`; fails after two minutes."""
    deadline = time.time() + 120
    while time.time() < deadline:
        states = [work / STATE_FILE.format(r) for r in range(replicas)]
        if all(s.exists() and json.loads(s.read_bytes().partition(b"\n")[0])["frames"] >= frames for s in states):
            return
        time.sleep(0.05)
    raise AssertionError(f"the replicas did not commit {frames} frames each within 120 s")


def _gone(pids: set[int]) -> bool:
    """Whether none of `pids` lives on (waiting up to 30 s for them to exit)."""
    deadline = time.time() + 30
    while time.time() < deadline and any(map(_alive, pids)):
        time.sleep(0.05)
    return not any(map(_alive, pids))


@pytest.mark.slow
def test_resume_after_sigkill_gives_exact_frames(tmp_path):
    out = tmp_path / "run.h5"
    size = ("--frames", "12000", "--replicas", "2", "--equilibration-ps", "1", "--platform", "Reference")
    args = ("simulate", "--out", str(out), *size, "--quiet")
    proc = start_cli(*args, cwd=tmp_path)
    _wait_for_frames(tmp_path / "run.h5.partial", 1, 2000)
    replicas = _children(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists()
    assert len(replicas) == 2 and _gone(replicas)  # the replicas died with their parent
    finished = start_cli(*args, cwd=tmp_path)
    _, err = finished.communicate(timeout=300)
    assert finished.returncode == 0, err
    assert not (tmp_path / "run.h5.partial").exists()
    data = load_trajectory(out, 22, extras=("replica",))
    assert np.bincount(data.extras["replica"]).tolist() == [6000, 6000]
    settings = MDSettings(frames=12000, replicas=2, equilibration_ps=1.0, platform="Reference")
    unbroken = load_trajectory(simulate(tmp_path / "unbroken.h5", settings, progress=False))
    np.testing.assert_array_equal(data.xyz, unbroken.xyz)  # the kill lost and changed nothing
    np.testing.assert_array_equal(data.energies, unbroken.energies)


@pytest.mark.slow
def test_ctrl_c_stops_the_replicas_and_a_rerun_resumes(tmp_path):
    out = tmp_path / "run.h5"
    args = ("simulate", "--out", str(out), "--frames", "20000", "--replicas", "2", "--equilibration-ps", "1", "--quiet")
    # Ctrl-C in a terminal signals the whole process group; SIGINT as Python installs it, even
    # when the tests themselves run with it ignored (a background job).
    proc = start_cli(
        *args, cwd=tmp_path, start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
    )
    _wait_for_frames(tmp_path / "run.h5.partial", 2, 2000)
    replicas = _children(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "rerun the same command to resume" in err and len(err.strip().splitlines()) == 1
    assert len(replicas) == 2 and _gone(replicas)
    assert not out.exists()
    finished = start_cli(*args, cwd=tmp_path)
    _, err = finished.communicate(timeout=300)
    assert finished.returncode == 0, err
    data = load_trajectory(out, 22, extras=("replica",))
    assert np.bincount(data.extras["replica"]).tolist() == [10000, 10000]
    assert np.unique(data.xyz.reshape(20000, -1), axis=0).shape[0] == 20000


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
def test_bad_input_is_refused_cleanly(tmp_path, cli, args, message):
    out = tmp_path / "bad.h5"
    result = cli("simulate", "--out", str(out), *args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists() and not (tmp_path / "bad.h5.partial").exists()


def test_finished_file_is_not_overwritten(tmp_path, cli):
    out = tmp_path / "done.h5"
    out.write_bytes(b"precious")
    result = cli("simulate", "--out", str(out), "--frames", "5")
    assert result.returncode == 2 and "--overwrite" in result.stderr
    assert out.read_bytes() == b"precious"


def test_the_default_output_is_named_by_molecule_and_temperature(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a file in the way at the default name shows which name was taken
    for args, name in (([], "ala2-600K.h5"), (["--molecule", "alanine-tetrapeptide", "--temperature", "300"],
                                               "alanine-tetrapeptide-300K.h5")):  # fmt: skip
        (tmp_path / "data").mkdir(exist_ok=True)
        (tmp_path / "data" / name).write_bytes(b"precious")
        result = cli("simulate", "--frames", "5", *args)
        assert result.returncode == 2 and f"data/{name}" in result.stderr and "--overwrite" in result.stderr


@pytest.mark.parametrize(
    "name, message",
    [("bad.txt", "ending in .h5"), ("folder.h5", "is a directory"), ("taken.txt", "ending in .h5")],
)
def test_an_output_that_is_no_h5_file_path_is_refused(tmp_path, cli, name, message):
    (tmp_path / "folder.h5").mkdir()
    (tmp_path / "taken.txt").write_text("x")  # an existing file: --overwrite would not help either
    result = cli("simulate", "--out", str(tmp_path / name), "--frames", "5")
    assert result.returncode == 2 and message in result.stderr and "--overwrite" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.h5", "taken.txt"]


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
    _, resumed = _prepare(out, MDSettings(frames=10, replicas=0).resolved(), overwrite=False, left=("replicas",))
    assert resumed.replicas == 3 and resumed.seeds() == started.seeds()
    with pytest.raises(InputError, match=r"other settings \(replicas\)"):
        _prepare(out, MDSettings(frames=10, replicas=2).resolved(), overwrite=False, left=())


def test_auto_platform_goes_by_atom_count_and_custom_forces(monkeypatch):
    from bgp4.platform import AUTO_CPU_ATOMS, resolve_platform
    from bgp4.simulation.energy import OpenMMEnergy

    assert resolve_platform("auto") == resolve_platform("AUTO", AUTO_CPU_ATOMS) == "Reference"
    assert resolve_platform("auto", AUTO_CPU_ATOMS + 1) == "CPU"
    assert resolve_platform("auto", 22, custom=True) == "CPU"
    assert resolve_platform("reference", 10_000, custom=True) == "Reference"  # a named platform is never overridden
    assert MDSettings().resolved().platform == "Reference"  # alanine dipeptide, 22 atoms, GBSAOBCForce
    # the OBC1 and OBC2 files of amber96 and amber14 are CustomGBForces: 30-40x slower on Reference
    assert MDSettings(forcefield="amber96").resolved().platform == "CPU"
    assert MDSettings(forcefield="amber14").resolved().platform == "CPU"
    assert MDSettings(forcefield="amber96", solvent="vacuum").resolved().platform == "Reference"
    from bgp4.simulation.molecule import platform_traits

    assert platform_traits("alanine-tetrapeptide") == (42, False)
    monkeypatch.setattr("bgp4.simulation.molecule.platform_traits", lambda *args: (AUTO_CPU_ATOMS + 62, False))
    assert MDSettings().resolved().platform == "CPU"
    assert MDSettings(platform="Reference").resolved().platform == "Reference"
    system = openmm.System()
    for _ in range(AUTO_CPU_ATOMS + 1):
        system.addParticle(1.0)
    with OpenMMEnergy(system, 300.0, n_workers=1) as energy:  # the bridge chooses by the same rule
        assert energy.platform == "CPU"
        assert energy.energies_kjmol(np.zeros((1, AUTO_CPU_ATOMS + 1, 3))).tolist() == [0.0]
    small = openmm.System()
    small.addParticle(1.0)
    small.addForce(openmm.CustomExternalForce("0"))
    small.getForce(0).addParticle(0, [])
    with OpenMMEnergy(small, 300.0, n_workers=1) as energy:
        assert energy.platform == "CPU"


def test_an_auto_platform_run_matches_the_platform_it_was_made_on(tmp_path):
    """A request with platform auto accepts a stored run on another platform (an older version's
    choice) and resumes there; a named platform still refuses it."""
    from bgp4.simulation.md import _prepare, _settings_record

    out, work = tmp_path / "p.h5", tmp_path / "p.h5.partial"
    work.mkdir()
    started = MDSettings(frames=10, replicas=1, platform="CPU").resolved()
    (work / "settings.json").write_text(json.dumps(_settings_record(started)))
    request = MDSettings(frames=10, replicas=1)
    assert request.left_to_bgp4() == ("platform",)
    _, resumed = _prepare(out, request.resolved(), overwrite=False, left=request.left_to_bgp4())
    assert resumed.platform == "CPU"
    with pytest.raises(InputError, match=r"other settings \(platform\)"):
        _prepare(out, MDSettings(frames=10, replicas=1, platform="Reference").resolved(), overwrite=False, left=())
