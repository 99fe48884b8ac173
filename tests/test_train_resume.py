"""Training resumed: in parts, after a kill or Ctrl-C, reruns of a finished run, --init from another run."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from _cli_helpers import _one_line_error
from _train_helpers import TINY, _assert_same_model, _killed_at, _tiny_trainer

from bgp4.errors import InputError
from bgp4.generator.rundir import RunDirectory
from bgp4.generator.train import TrainSettings, train

_IN_PARTS = {
    "mixed": dict(model="p4inv", merge_every=5, steps=30, energy_steps=6),
    # FAB: the kept Trainer carries its replay buffer in memory, the fresh one reads it from the checkpoint
    "fab": dict(model="spline", blocks=1, steps=30, energy_steps=6, objective="fab", fab_levels=2, fab_buffer=128),
}


@pytest.mark.slow
@pytest.mark.parametrize("objective", list(_IN_PARTS))
def test_training_in_parts_equals_an_unbroken_run(md_file, tmp_path, objective):
    """A sweep trains a run in parts (`fit(until=...)`), on a Trainer its worker kept or a new one."""
    from bgp4.generator.train import finish_training, prepare_training

    settings = TrainSettings(data=str(md_file), **{**TINY, "eval_every": 10, **_IN_PARTS[objective]})
    train(settings, tmp_path / "unbroken", progress=False)
    kept = prepare_training(settings, tmp_path / "parts")
    assert kept.fit(progress=False, until=13) is None and kept.step == 13
    assert kept.fit(progress=False, until=33) is None and kept.step == 33
    assert kept._openmm is not None  # in the energy phase: its OpenMM workers stay open for the next part
    fresh = prepare_training(settings, tmp_path / "parts")  # another worker takes the last part
    summary = fresh.fit(progress=False, until=40)
    kept.close()
    assert summary is not None and summary["steps"] == 36 and fresh._openmm is None
    finish_training(fresh, summary)
    assert RunDirectory(tmp_path / "parts").complete
    _assert_same_model(tmp_path / "unbroken", tmp_path / "parts")
    records = [
        [{k: v for k, v in r.items() if k != "wall_s"} for r in RunDirectory(tmp_path / run).records()]
        for run in ("unbroken", "parts")
    ]
    assert records[0] == records[1]


@pytest.mark.slow
def test_keep_best_ends_the_likelihood_phase_with_the_best_weights_and_resumes(md_file, tmp_path, monkeypatch):
    """--keep-best: the model of the lowest test NLL (scripted: step 10 of 30) is the model a 10-step run
    gives (constant lr); a run trained in parts, on a fresh Trainer after the best step, ends the same."""
    from bgp4.generator.loop import TrainingLoop
    from bgp4.generator.train import finish_training, prepare_training

    scripted = {0: 5.0, 10: 1.0, 20: 3.0, 30: 2.0}
    monkeypatch.setattr(TrainingLoop, "test_nll", lambda self: (scripted.get(self.step, 5.0), 0))
    settings = TrainSettings(
        data=str(md_file), model="rnvp", keep_best=True, **{**TINY, "steps": 30, "energy_steps": 0}
    )
    settings = replace(settings, eval_every=10)
    summary, _ = train(settings, tmp_path / "best", progress=False)
    assert (summary["kept_step"], summary["kept_test_nll"], summary["test_nll_end"]) == (10, 1.0, 1.0)
    train(replace(settings, steps=10, keep_best=False), tmp_path / "short", progress=False)
    _assert_same_model(tmp_path / "best", tmp_path / "short")
    first = prepare_training(settings, tmp_path / "parts")
    assert first.fit(progress=False, until=15) is None
    rest = prepare_training(settings, tmp_path / "parts")  # the best weights come back from the checkpoint
    finish_training(rest, rest.fit(progress=False))
    _assert_same_model(tmp_path / "best", tmp_path / "parts")
    state = torch.load(tmp_path / "best" / "checkpoint.pt", weights_only=True)
    assert state["best"] == {"step": 10, "test_nll": 1.0}  # restored: the checkpoint keeps no second copy
    # an energy phase follows from the kept weights; test_nll_end is then the energy phase's
    summary, _ = train(replace(settings, energy_steps=2), tmp_path / "energy", progress=False)
    assert (summary["kept_step"], summary["test_nll_end"]) == (10, 5.0)


@pytest.mark.slow
def test_augmented_compiled_run_resumes_exactly(md_file, tmp_path, monkeypatch):
    # the compile warm-up runs on every start: it must not draw from the checkpointed batch stream
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    settings = TrainSettings(
        data=str(md_file),
        model="rnvp",
        augment=True,
        compile="on",
        checkpoint_minutes=1e-9,
        **{**TINY, "steps": 20, "energy_steps": 0, "eval_every": 10},
    )
    train(settings, tmp_path / "unbroken", progress=False)
    _killed_at(settings, tmp_path / "broken", 13, monkeypatch)
    train(settings, tmp_path / "broken", progress=False)
    _assert_same_model(tmp_path / "unbroken", tmp_path / "broken")


@pytest.mark.slow
def test_resume_after_interruption_equals_unbroken_run(md_file, tmp_path, monkeypatch):
    settings = TrainSettings(
        data=str(md_file),
        model="p4inv",
        merge_every=5,
        checkpoint_minutes=1e-9,
        **{**TINY, "steps": 30, "energy_steps": 6, "eval_every": 10},
    )
    train(settings, tmp_path / "unbroken", progress=False)
    _killed_at(settings, tmp_path / "broken", 33, monkeypatch)
    assert not RunDirectory(tmp_path / "broken").complete
    # settings that do not change the result may differ on resume: the data file's path, workers,
    # the checkpoint interval
    copy = tmp_path / "copy.h5"
    copy.write_bytes(md_file.read_bytes())
    train(replace(settings, data=str(copy), workers=2, checkpoint_minutes=2e-9), tmp_path / "broken", progress=False)
    _assert_same_model(tmp_path / "unbroken", tmp_path / "broken")
    steps = [r["global_step"] for r in RunDirectory(tmp_path / "broken").records()]
    assert steps == sorted(set(steps))


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bgp4.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_ctrl_c_saves_at_a_step_boundary_and_resumes_exactly(md_file, tmp_path):
    import signal
    import time

    args = [
        "--data",
        str(md_file),
        "--model",
        "p4inv",
        "--blocks",
        "2",
        "--hidden",
        "32",
        "--batch",
        "64",
        "--steps",
        "800",
        "--energy-steps",
        "0",
        "--merge-every",
        "5",
        "--eval-every",
        "50",
        "--quiet",
    ]
    out = tmp_path / "interrupted"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bgp4.cli", "train", "--out", str(out), *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 300
    while sum(1 for _ in RunDirectory(out).records()) < 2:  # step 100 logged: mid-run, 700 steps to go
        assert time.time() < deadline and proc.poll() is None, "training never reached step 100"
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err
    saved = torch.load(out / "checkpoint.pt", weights_only=True)["step"]
    assert 0 < saved < 800
    assert all(r["global_step"] <= saved for r in RunDirectory(out).records())
    resumed = _cli("train", "--out", str(out), *args, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    unbroken = _cli("train", "--out", str(tmp_path / "unbroken"), *args, cwd=tmp_path)
    assert unbroken.returncode == 0, unbroken.stderr
    a = torch.load(out / "model.pt", weights_only=True)["state_dict"]
    b = torch.load(tmp_path / "unbroken" / "model.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)


# ------------------------------------------------------------------ resuming and rerunning
def test_rerun_ignores_workers_checkpoint_interval_and_data_path_but_not_results(md_file, tmp_path):
    import shutil

    from bgp4.simulation.data import load_trajectory, write_trajectory

    settings = TrainSettings(data=str(md_file), model="rnvp", **{**TINY, "steps": 10, "energy_steps": 0, "blocks": 1})
    train(settings, tmp_path / "run", progress=False)
    moved = tmp_path / "elsewhere" / "same.h5"
    moved.parent.mkdir()
    shutil.copy(md_file, moved)
    same = replace(settings, data=str(moved), workers=2, checkpoint_minutes=30.0)
    summary, trained = train(same, tmp_path / "run", progress=False)
    assert not trained and summary["steps"] == 10
    with pytest.raises(InputError, match=r"other settings \(lr\)"):
        train(replace(settings, lr=0.5), tmp_path / "run", progress=False)
    data = load_trajectory(md_file, 22)
    other = tmp_path / "other.h5"  # other frames under the same settings attribute
    write_trajectory(other, data.topology, iter([{"coordinates": data.xyz[:2000]}]), data.settings)
    with pytest.raises(InputError, match=r"other settings \(data\)"):
        train(replace(settings, data=str(other)), tmp_path / "run", progress=False)


@pytest.mark.slow
def test_prepare_training_of_a_complete_run_gives_a_complete_trainer(md_file, tmp_path):
    from bgp4.generator.train import prepare_training

    settings = TrainSettings(data=str(md_file), model="rnvp", **{**TINY, "steps": 5, "energy_steps": 0, "blocks": 1})
    fresh = prepare_training(settings, tmp_path / "run")
    assert not fresh.complete and fresh.step == 0 and fresh.summary is None
    summary, trained = train(settings, tmp_path / "run", progress=False)
    done = prepare_training(settings, tmp_path / "run")
    assert trained and done.complete and done.summary == summary and done.step == 5
    assert done.fit(progress=False) == summary  # nothing left to train
    done.close()


@pytest.mark.slow
def test_damaged_checkpoint_is_refused_cleanly(md_file, tmp_path):
    settings = TrainSettings(data=str(md_file), model="rnvp", **{**TINY, "steps": 5, "energy_steps": 0, "blocks": 1})
    train(settings, tmp_path / "run", progress=False)
    (tmp_path / "run" / "complete.json").unlink()  # an unfinished run whose checkpoint is damaged
    (tmp_path / "run" / "checkpoint.pt").write_bytes(b"\x80\x02 not a checkpoint")
    with pytest.raises(InputError, match="checkpoint.pt is damaged"):
        train(settings, tmp_path / "run", progress=False)


@pytest.mark.slow
def test_init_starts_from_a_finished_run_and_refuses_a_mismatch(md_file, tmp_path):
    from bgp4.generator.model import load_generator

    base = TrainSettings(data=str(md_file), model="rnvp", **{**TINY, "steps": 20, "energy_steps": 0, "eval_every": 10})
    first, _ = train(base, tmp_path / "first", progress=False)
    tuned = replace(base, steps=0, energy_steps=2, init=str(tmp_path / "first"))
    summary, trained = train(tuned, tmp_path / "tuned", progress=False)
    assert trained and summary["test_nll_start"] == pytest.approx(first["test_nll_end"], abs=1e-4)
    assert summary["energy_evaluations"] == 2 * TINY["batch"]
    assert RunDirectory(tmp_path / "tuned").settings()["init"] == str((tmp_path / "first").resolve())
    changed = load_generator(tmp_path / "tuned" / "model.pt").state_dict()
    start = load_generator(tmp_path / "first" / "model.pt").state_dict()
    assert any(not torch.equal(changed[k], start[k]) for k in start)  # the energy steps moved it
    for other, word in (
        (dict(hidden=16), "hidden"),
        (dict(seed=3), "seed"),
        (dict(model="p4inv"), "model"),
        (dict(zmatrix="auto"), "zmatrix"),  # another transform: the state dict would not fit it
    ):
        with pytest.raises(InputError, match=word):
            train(replace(tuned, **other), tmp_path / f"bad-{word}", progress=False)
        assert not (tmp_path / f"bad-{word}").exists()
    with pytest.raises(InputError, match="not a finished"):
        train(replace(tuned, init=str(tmp_path / "nothing")), tmp_path / "bad-missing", progress=False)


@pytest.mark.slow
def test_automatic_zmatrix_run_trains_resumes_and_reloads(md_file, tmp_path, cli):
    from bgp4.generator.model import load_generator
    from bgp4.generator.train import finish_training, prepare_training
    from bgp4.simulation.zmatrix import automatic_zmatrix

    settings = TrainSettings(
        data=str(md_file), model="spline", zmatrix="auto", **{**TINY, "steps": 8, "energy_steps": 2, "eval_every": 4}
    )
    first = prepare_training(settings, tmp_path / "auto")
    assert first.bg.zmatrix == "auto" and first.bg.n_dims == 48
    assert first.fit(progress=False, until=5) is None
    first.close()
    resumed = prepare_training(settings, tmp_path / "auto")  # resumes from the checkpoint at step 5
    summary = resumed.fit(progress=False)
    finish_training(resumed, summary)
    train(settings, tmp_path / "unbroken", progress=False)
    _assert_same_model(tmp_path / "unbroken", tmp_path / "auto")
    assert summary["steps"] == 10 and summary["n_dims"] == 48 and summary["weights_defined"]
    assert RunDirectory(tmp_path / "auto").settings()["zmatrix"] == "auto"
    bg = load_generator(tmp_path / "auto" / "model.pt")
    rows, _ = automatic_zmatrix(bg.molecule().topology)
    assert bg.zmatrix == "auto" and [list(r) for r in bg.transform.z_matrix] == [list(r) for r in rows]
    x = torch.as_tensor(resumed.data.train_frames[:16])
    with torch.no_grad():
        torch.testing.assert_close(bg.log_prob(x), resumed.bg.cpu().log_prob(x), rtol=0, atol=0)
    with pytest.raises(InputError, match=r"other settings \(zmatrix\)"):
        train(replace(settings, zmatrix="hand"), tmp_path / "auto", progress=False)
    help_text = cli("train", "--help").stdout
    assert "--zmatrix" in help_text and "hand" in help_text
    bad = _one_line_error(cli("train", "--data", str(md_file), "--out", str(tmp_path / "x"), "--zmatrix", "bond"))
    assert "zmatrix (--zmatrix) must be one of hand, auto" in bad


def test_init_keeps_its_transform_and_a_refitted_checkpoint_remaps_the_frames(md_file, tmp_path, capsys):
    """--init from a run fitted to other frames: the generator is that run's model, transform and
    circular torsions included, and the frames are mapped by it. A transform loaded from a
    checkpoint that differs from the fresh fit (an older bgp4's) remaps them."""
    from bgp4.generator.model import load_generator
    from bgp4.simulation.md import MDSettings, simulate

    small = {**TINY, "blocks": 1, "hidden": 8, "compile": "off", "steps": 2, "energy_steps": 0, "eval_every": 1}
    train(TrainSettings(data=str(md_file), model="spline", **small), tmp_path / "first", progress=False)
    other = tmp_path / "other.h5"
    simulate(other, MDSettings(frames=600, equilibration_ps=1.0, replicas=1, seed=12), progress=False)
    tuned = _tiny_trainer(other, tmp_path, model="spline", steps=2, energy_steps=0, init=str(tmp_path / "first"))
    start = load_generator(tmp_path / "first" / "model.pt").state_dict()
    assert all(torch.equal(v, start[k]) for k, v in tuned.bg.state_dict().items())
    mapped = tuned.bg.flow_coordinates(torch.as_tensor(tuned.data._test_frames))[0]
    assert torch.allclose(tuned.data.test_y[0], mapped)
    assert not tuned.data.remap_if_refitted()  # nothing changed since
    with torch.no_grad():
        tuned.bg.transform.torsion_std.mul_(1.5)  # as a checkpoint fitted otherwise would load
    assert tuned.data.remap_if_refitted() and "differs" in capsys.readouterr().err
    assert not torch.allclose(tuned.data.test_y[0], mapped)
