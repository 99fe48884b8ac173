"""Training end to end on tiny sizes: both models, resume equals an unbroken run, config, bad input."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mdtraj
import numpy as np
import pytest
import torch

from bgp4.errors import InputError
from bgp4.md import MDSettings, simulate
from bgp4.train import Trainer, TrainSettings, train
from bgp4.rundir import RunDirectory

TINY = dict(blocks=2, hidden=32, batch=64, steps=150, energy_steps=10, eval_every=50, workers=1)


@pytest.fixture(scope="session")
def md_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "ala2.h5"
    simulate(path, MDSettings(frames=3000, equilibration_ps=2.0, replicas=2, seed=11), progress=False)
    return path


@pytest.mark.parametrize("model", ["rnvp", "p4inv", "spline"])
def test_short_training_lowers_test_nll(md_file, tmp_path, model):
    settings = TrainSettings(data=str(md_file), model=model, merge_every=10, correct_every=2, **TINY)
    summary, trained = train(settings, tmp_path / model, progress=False)
    assert trained
    # 48 dims, nothing to squeeze: the first steps gain less than the paper's 60-dim setup did
    assert summary["test_nll_end"] < summary["test_nll_start"] - 0.3
    assert summary["weights_defined"] and summary["n_dims"] == 48
    assert summary["energy_evaluations"] == TINY["energy_steps"] * TINY["batch"]
    run = RunDirectory(tmp_path / model)
    records = list(run.records())
    assert [r["global_step"] for r in records if "test_nll" in r] == [0, 50, 100, 150, 160]
    energy = [r for r in records if r["phase"] == "energy"]
    assert energy and np.isfinite(energy[-1]["energy_kT"])
    assert (tmp_path / model / "training.png").stat().st_size > 0
    from bgp4.model import load_generator

    bg = load_generator(run.file("model.pt"))
    assert bg.config["kind"] == model
    if model == "p4inv":
        assert summary["p4inv_accepted"] + summary["p4inv_forced"] > 0
        assert summary["p4inv_max_residual"] < 1e-4


def test_resume_after_interruption_equals_unbroken_run(md_file, tmp_path, monkeypatch):
    settings = TrainSettings(data=str(md_file), model="p4inv", merge_every=5, checkpoint_minutes=1e-9,
                             **{**TINY, "steps": 30, "energy_steps": 6, "eval_every": 10})
    train(settings, tmp_path / "unbroken", progress=False)

    original = Trainer._train_step

    def crash_at_33(self, energy):
        if self.step == 33:
            raise RuntimeError("simulated kill")
        return original(self, energy)

    monkeypatch.setattr(Trainer, "_train_step", crash_at_33)
    with pytest.raises(RuntimeError, match="simulated kill"):
        train(settings, tmp_path / "broken", progress=False)
    monkeypatch.setattr(Trainer, "_train_step", original)
    assert not RunDirectory(tmp_path / "broken").complete
    train(settings, tmp_path / "broken", progress=False)

    a = torch.load(tmp_path / "unbroken" / "model.pt", weights_only=True)["state_dict"]
    b = torch.load(tmp_path / "broken" / "model.pt", weights_only=True)["state_dict"]
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    steps = [r["global_step"] for r in RunDirectory(tmp_path / "broken").records()]
    assert steps == sorted(set(steps))


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bgp4.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_config_file_and_flags_combine_and_rerun_is_complete(md_file, tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('model = "rnvp"\nsteps = 20\nenergy-steps = 0\nblocks = 1\nhidden = 8\nbatch = 128\nlr = 0.002\n')
    out = tmp_path / "run"
    args = ("train", "--data", str(md_file), "--out", str(out), "--config", str(config), "--batch", "32", "--quiet")
    first = _cli(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    stored = json.loads((out / "settings.json").read_text())
    assert (stored["model"], stored["steps"], stored["batch"], stored["lr"], stored["energy_steps"]) == ("rnvp", 20, 32, 0.002, 0)
    assert stored["merge_every"] == 100  # untouched default
    again = _cli(*args, cwd=tmp_path)
    assert again.returncode == 0 and "already complete" in again.stdout


def _one_line_error(result: subprocess.CompletedProcess, code: int = 2) -> str:
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_bad_inputs_are_refused_cleanly(md_file, tmp_path):
    garbage = tmp_path / "garbage.h5"
    garbage.write_bytes(b"not an hdf5 file")
    small = tmp_path / "three_atoms.h5"
    top = mdtraj.Topology()
    chain = top.add_chain()
    residue = top.add_residue("HOH", chain)
    for name in ("O", "H1", "H2"):
        top.add_atom(name, mdtraj.element.get_by_symbol(name[0]), residue)
    mdtraj.Trajectory(np.zeros((300, 3, 3), dtype=np.float32), top).save_hdf5(str(small))
    cases = [
        (["--data", str(tmp_path / "missing.h5")], "not found"),
        (["--data", str(garbage)], "not an mdtraj"),
        (["--data", str(small)], "atoms"),
        (["--data", str(md_file), "--batch", "100000"], "fewer than one batch"),
        (["--data", str(md_file), "--steps", "-5"], "--steps"),
        (["--data", str(md_file), "--model", "glow"], "unknown model"),
        (["--data", str(md_file), "--seed", "-1"], "--seed"),
        (["--data", str(md_file), "--test-fraction", "0.0001"], "no test frames"),
    ]
    for args, message in cases:
        line = _one_line_error(_cli("train", "--out", str(tmp_path / "bad"), *args, "--quiet", cwd=tmp_path))
        assert message in line, line


def test_settings_validation():
    with pytest.raises(InputError):
        TrainSettings(test_fraction=1.5).validated()
    with pytest.raises(InputError):
        TrainSettings(device="tpu").validated()
    with pytest.raises(InputError):
        TrainSettings(compile="yes").validated()


def test_compiled_likelihood_matches_eager_through_p4inv_merges(md_file, tmp_path):
    """The compiled training loss reads the P4Inv buffers that merges change in place."""
    from bgp4.data import load_trajectory

    settings = TrainSettings(data=str(md_file), model="p4inv", compile="on", merge_every=2, **TINY).validated()
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    trainer = Trainer(settings, run, load_trajectory(settings.data, n_atoms=22))
    trainer._compile(progress=False)
    if not trainer.compiled:
        pytest.skip("torch.compile is not available on this machine")
    y, ld = trainer.train_y[0][:64], trainer.train_y[1][:64]
    for _ in range(6):  # three merges: A, A_inv and log|det A| change under the compiled graph
        trainer._train_step(None)
        torch.testing.assert_close(trainer.batch_nll(y, ld), trainer._nll(y, ld), rtol=1e-4, atol=1e-3)
    assert trainer.scheduler.stats["accepted"] + trainer.scheduler.stats["forced"] > 0


def test_failed_compile_falls_back_to_eager(md_file, tmp_path, monkeypatch, capsys):
    from bgp4.data import load_trajectory

    def broken_compile(fn, **kwargs):
        def compiled(*args):
            raise RuntimeError("no C++ compiler found")
        return compiled

    monkeypatch.setattr(torch, "compile", broken_compile)
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    settings = TrainSettings(data=str(md_file), model="p4inv", compile="on", **TINY).validated()
    trainer = Trainer(settings, run, load_trajectory(settings.data, n_atoms=22))
    trainer._compile(progress=False)
    assert not trainer.compiled and trainer.batch_nll == trainer._nll
    assert "torch.compile failed (RuntimeError: no C++ compiler found); training without it" in capsys.readouterr().err
    assert all(p.grad is None for p in trainer.bg.parameters())
    assert trainer._train_step(None) is not None  # eager training goes on


def test_auto_compile_only_for_long_cpu_runs(md_file, tmp_path):
    from bgp4.data import load_trajectory

    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    settings = TrainSettings(data=str(md_file), model="rnvp", **TINY).validated()
    trainer = Trainer(settings, run, load_trajectory(settings.data, n_atoms=22))
    trainer._compile(progress=False)
    assert not trainer.compiled and trainer.batch_nll == trainer._nll


def test_ctrl_c_saves_at_a_step_boundary_and_resumes_exactly(md_file, tmp_path):
    import signal
    import time

    args = ["--data", str(md_file), "--model", "p4inv", "--blocks", "2", "--hidden", "32", "--batch", "64",
            "--steps", "800", "--energy-steps", "0", "--merge-every", "5", "--eval-every", "50", "--quiet"]
    out = tmp_path / "interrupted"
    proc = subprocess.Popen([sys.executable, "-m", "bgp4.cli", "train", "--out", str(out), *args],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and sum(1 for _ in RunDirectory(out).records()) < 2:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err
    saved = torch.load(out / "checkpoint.pt", weights_only=False)["step"]
    assert 0 < saved < 800
    assert all(r["global_step"] <= saved for r in RunDirectory(out).records())
    resumed = _cli("train", "--out", str(out), *args, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    unbroken = _cli("train", "--out", str(tmp_path / "unbroken"), *args, cwd=tmp_path)
    assert unbroken.returncode == 0, unbroken.stderr
    a = torch.load(out / "model.pt", weights_only=True)["state_dict"]
    b = torch.load(tmp_path / "unbroken" / "model.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_overwrite_refuses_a_directory_that_is_not_a_run(md_file, tmp_path):
    precious = tmp_path / "notes"
    precious.mkdir()
    (precious / "thesis.tex").write_text("keep me")
    result = _cli("train", "--data", str(md_file), "--out", str(precious), "--overwrite", "--quiet", cwd=tmp_path)
    assert "not a bgp4 run directory" in _one_line_error(result)
    assert (precious / "thesis.tex").read_text() == "keep me"
