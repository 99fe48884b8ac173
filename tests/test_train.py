"""Training end to end on tiny sizes: both models, resume equals an unbroken run, config, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import mdtraj
import numpy as np
import pytest
import torch

from bgp4.errors import InputError
from bgp4.generator.rundir import RunDirectory
from bgp4.generator.train import Trainer, TrainSettings, train

TINY = dict(blocks=2, hidden=32, batch=64, steps=150, energy_steps=10, eval_every=50, workers=1)


@pytest.mark.slow
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
    from bgp4.generator.model import load_generator

    bg = load_generator(run.file("model.pt"))
    assert bg.config["kind"] == model
    if model == "p4inv":
        assert summary["p4inv_accepted"] + summary["p4inv_forced"] > 0
        assert summary["p4inv_max_residual"] < 1e-4


@pytest.mark.slow
def test_augment_relabels_methyl_hydrogens_of_each_batch(md_file, tmp_path):
    from bgp4.simulation.data import load_trajectory, relabel_rotors

    data = load_trajectory(md_file)
    settings = TrainSettings(
        data=str(md_file), model="rnvp", augment=True, compile="off", **{**TINY, "steps": 5, "energy_steps": 0}
    ).validated()
    (tmp_path / "aug").mkdir(), (tmp_path / "plain").mkdir()
    trainer = Trainer(settings, RunDirectory(tmp_path / "aug"), data)
    plain = Trainer(replace(settings, augment=False), RunDirectory(tmp_path / "plain"), data)
    idx = torch.arange(64)
    shifts = torch.randint(
        3, (64, 3), generator=torch.Generator().set_state(trainer.data.batch_gen.get_state())
    ).numpy()
    y_aug, ld_aug = trainer.data.batch(idx)
    y, _ = plain.data.batch(idx)
    # exactly the drawn relabelling of exactly these frames; a frame with all shifts 0 is unchanged
    expected = plain.data.flow_coordinates(
        relabel_rotors(trainer.data.train_xyz[idx.numpy()], trainer.data.rotors, shifts)
    )
    torch.testing.assert_close(y_aug, expected[0], rtol=0, atol=0)
    torch.testing.assert_close(ld_aug, expected[1], rtol=0, atol=0)
    assert torch.equal((y_aug != y).any(1), torch.as_tensor((shifts != 0).any(1)))
    assert torch.equal(trainer.data.test_y[0], plain.data.test_y[0])  # the test NLL scores frames as simulated
    summary, trained = train(settings, tmp_path / "run", progress=False)
    assert trained and np.isfinite(summary["test_nll_end"])
    assert json.loads((tmp_path / "run" / "settings.json").read_text())["augment"] is True


def test_augment_without_interchangeable_hydrogens_is_refused(md_file, tmp_path, monkeypatch):
    import bgp4.generator.train

    monkeypatch.setattr(bgp4.generator.train, "rotor_hydrogens", lambda molecule: [])
    settings = TrainSettings(data=str(md_file), model="rnvp", augment=True, compile="off", **TINY)
    with pytest.raises(InputError, match="no interchangeable hydrogen triples"):
        train(settings, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def _killed_at(settings: TrainSettings, out: Path, step: int, monkeypatch) -> None:
    """Train into `out` until `step`, where a simulated kill stops it (checkpoints as written so far)."""
    from bgp4.generator.loop import TrainingLoop

    original = TrainingLoop.train_step

    def crash(self, energy):
        if self.step == step:
            raise RuntimeError("simulated kill")
        return original(self, energy)

    monkeypatch.setattr(TrainingLoop, "train_step", crash)
    with pytest.raises(RuntimeError, match="simulated kill"):
        train(settings, out, progress=False)
    monkeypatch.setattr(TrainingLoop, "train_step", original)


def _assert_same_model(a_run: Path, b_run: Path) -> None:
    a = torch.load(a_run / "model.pt", weights_only=True)["state_dict"]
    b = torch.load(b_run / "model.pt", weights_only=True)["state_dict"]
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


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


def test_config_file_and_flags_combine_and_rerun_is_complete(md_file, tmp_path, cli):
    config = tmp_path / "run.toml"
    config.write_text('model = "rnvp"\nsteps = 20\nenergy-steps = 0\nblocks = 1\nhidden = 8\nbatch = 128\nlr = 0.002\n')
    out = tmp_path / "run"
    args = ("train", "--data", str(md_file), "--out", str(out), "--config", str(config), "--batch", "32", "--quiet")
    first = cli(*args)
    assert first.returncode == 0, first.stderr
    stored = json.loads((out / "settings.json").read_text())
    assert (stored["model"], stored["steps"], stored["batch"], stored["lr"], stored["energy_steps"]) == (
        "rnvp",
        20,
        32,
        0.002,
        0,
    )
    assert stored["merge_every"] == 100  # untouched default
    again = cli(*args)
    assert again.returncode == 0 and "already complete" in again.stdout


def _one_line_error(result, code: int = 2) -> str:
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_bad_inputs_are_refused_cleanly(md_file, tmp_path, cli):
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
        line = _one_line_error(cli("train", "--out", str(tmp_path / "bad"), *args, "--quiet"))
        assert message in line, line


def test_settings_validation():
    with pytest.raises(InputError):
        TrainSettings(test_fraction=1.5).validated()
    with pytest.raises(InputError):
        TrainSettings(device="tpu").validated()
    with pytest.raises(InputError):
        TrainSettings(compile="yes").validated()
    with pytest.raises(InputError, match=r"^zmatrix \(--zmatrix\) must be one of hand, auto, got 'bond'$"):
        TrainSettings(zmatrix="bond").validated()
    assert TrainSettings().zmatrix == "hand" and TrainSettings(zmatrix="auto").validated().zmatrix == "auto"


def _cxx_compiler() -> str | None:
    import os
    import shutil

    return next((c for c in (os.environ.get("CXX"), "g++", "c++", "clang++") if c and shutil.which(c)), None)


@pytest.mark.slow
@pytest.mark.skipif(_cxx_compiler() is None, reason="torch.compile on CPU needs a C++ compiler; none on PATH")
def test_compiled_likelihood_matches_eager_through_p4inv_merges(md_file, tmp_path):
    """The compiled training loss reads the P4Inv buffers that merges change in place."""
    from torch._dynamo.utils import counters

    from bgp4.simulation.data import load_trajectory

    settings = TrainSettings(data=str(md_file), model="p4inv", compile="on", merge_every=2, **TINY).validated()
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    trainer = Trainer(settings, run, load_trajectory(settings.data))
    graphs, autograd = counters["stats"]["unique_graphs"], counters["aot_autograd"]["ok"]
    breaks = sum(counters["graph_break"].values())
    trainer.loop.compile(progress=False)
    # with a compiler at hand compiling must work, and really go through dynamo and AOT autograd
    assert trainer.loop.compiled, f"torch.compile failed although {_cxx_compiler()} is on PATH"
    assert counters["stats"]["unique_graphs"] > graphs and counters["aot_autograd"]["ok"] > autograd
    assert sum(counters["graph_break"].values()) == breaks  # no silent fallback to eager inside it
    y, ld = trainer.data.train_y[0][:64], trainer.data.train_y[1][:64]
    for _ in range(6):  # three merges: A, A_inv and log|det A| change under the compiled graph
        trainer.loop.train_step(None)
        torch.testing.assert_close(trainer.loop.batch_nll(y, ld), trainer.loop.nll(y, ld), rtol=1e-4, atol=1e-3)
    assert trainer.loop.scheduler.stats["accepted"] + trainer.loop.scheduler.stats["forced"] > 0


def test_failed_compile_falls_back_to_eager(md_file, tmp_path, monkeypatch, capsys):
    from bgp4.simulation.data import load_trajectory

    def broken_compile(fn, **kwargs):
        def compiled(*args):
            raise RuntimeError("no C++ compiler found")

        return compiled

    monkeypatch.setattr(torch, "compile", broken_compile)
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    settings = TrainSettings(data=str(md_file), model="p4inv", compile="on", **TINY).validated()
    trainer = Trainer(settings, run, load_trajectory(settings.data))
    trainer.loop.compile(progress=False)
    assert not trainer.loop.compiled and trainer.loop.batch_nll == trainer.loop.nll
    assert "torch.compile failed (RuntimeError: no C++ compiler found); training without it" in capsys.readouterr().err
    assert all(p.grad is None for p in trainer.bg.parameters())
    assert trainer.loop.train_step(None) is not None  # eager training goes on


@pytest.mark.parametrize(
    "model, steps, energy_steps, objective, compiles",
    [
        ("rnvp", 2999, 0, "ml", False),
        ("rnvp", 3000, 0, "ml", True),
        ("spline", 999, 0, "ml", False),
        ("spline", 1000, 0, "ml", True),
        ("spline", 500, 600, "kl", False),  # reverse-KL steps never go through the likelihood
        ("spline", 500, 600, "fab", True),  # FAB's buffer steps do
    ],
)
def test_auto_compile_counts_likelihood_steps_per_kind(
    md_file, tmp_path, monkeypatch, model, steps, energy_steps, objective, compiles
):
    from bgp4.simulation.data import load_trajectory

    # Stands in for the compiler: a distinct callable, so the loop's choice shows without a compile.
    monkeypatch.setattr(torch, "compile", lambda fn, dynamic: lambda *args: fn(*args))
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    tiny = {**TINY, "steps": steps, "energy_steps": energy_steps}
    settings = TrainSettings(data=str(md_file), model=model, objective=objective, **tiny).validated()
    trainer = Trainer(settings, run, load_trajectory(settings.data))
    trainer.loop.compile(progress=False)
    assert trainer.loop.compiled == compiles


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


def test_overwrite_refuses_a_directory_that_is_not_a_run(md_file, tmp_path, cli):
    precious = tmp_path / "notes"
    precious.mkdir()
    (precious / "thesis.tex").write_text("keep me")
    result = cli("train", "--data", str(md_file), "--out", str(precious), "--overwrite", "--quiet")
    assert "not a bgp4 run directory" in _one_line_error(result)
    assert (precious / "thesis.tex").read_text() == "keep me"


# ------------------------------------------------------------------ the energy-phase loss
def test_energy_phase_loss_weights_and_masks_out_of_domain_samples():
    from bgp4.generator.train import energy_phase_loss
    from bgp4.simulation.energy import regularize_energy

    nll = torch.tensor(3.0, requires_grad=True)
    u = torch.tensor([1.0, 2.0, 5e3, float("inf"), -7.0])  # kT: one above the soft cap, one unevaluable
    log_q = torch.tensor([0.5, -1.0, 2.0, 0.0, 100.0], requires_grad=True)
    ok = torch.tensor([True, True, True, True, False])  # the last sample left the IC domain
    loss, info = energy_phase_loss(nll, u, log_q, ok, energy_weight=0.25)
    kl = (regularize_energy(u[:4]) + log_q[:4]).mean()
    assert loss.item() == pytest.approx(0.8 * 3.0 + 0.2 * kl.item())  # w_l = 1/(1+r), w_e = r/(1+r)
    assert info["reverse_kl"] == pytest.approx(kl.item()) and info["train_nll"] == 3.0
    assert info["out_of_domain"] == pytest.approx(0.2)
    # energy statistics: finite in-domain samples only (1, 2, 5000 kT)
    assert info["energy_kT"] == pytest.approx((1.0 + 2.0 + 5e3) / 3)
    assert info["energy_median_kT"] == pytest.approx(2.0)
    loss.backward()
    assert log_q.grad[4] == 0.0 and torch.allclose(log_q.grad[:4], torch.full((4,), 0.2 / 4))
    assert nll.grad.item() == pytest.approx(0.8)
    # the out-of-domain sample does not count, whatever its numbers
    moved = energy_phase_loss(nll, u, torch.tensor([0.5, -1.0, 2.0, 0.0, -1e6]), ok, 0.25)[0]
    assert moved.item() == pytest.approx(loss.item())
    # no in-domain sample: the likelihood term alone; weight 0: the NLL
    none_ok = energy_phase_loss(nll, u, log_q, torch.zeros(5, dtype=torch.bool), 0.25)
    assert none_ok[0].item() == pytest.approx(0.8 * 3.0) and np.isnan(none_ok[1]["energy_kT"])
    assert energy_phase_loss(nll, u, log_q, ok, 0.0)[0].item() == pytest.approx(3.0)


def _tiny_trainer(md_file, tmp_path, **overrides):
    from bgp4.simulation.data import load_trajectory

    settings = TrainSettings(
        data=str(md_file), **{**TINY, "blocks": 1, "hidden": 8, "compile": "off", **overrides}
    ).validated()
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    return Trainer(settings, run, load_trajectory(settings.data))


def test_likelihood_loss_is_minus_log_q_on_a_toy_generator(md_file, tmp_path):
    from bgp4.generator.train import likelihood_loss

    trainer = _tiny_trainer(md_file, tmp_path, model="rnvp")
    x = torch.as_tensor(trainer.bg.sample(16).x.detach())
    y, logdet = trainer.bg.flow_coordinates(x)
    np.testing.assert_allclose(
        likelihood_loss(trainer.bg, y, logdet).detach(), -trainer.bg.log_prob(x).detach(), rtol=1e-5, atol=1e-3
    )


def test_penalty_weight_adds_the_p4inv_bound_penalty(md_file, tmp_path):
    from bgp4.generator.train import p4inv_penalty

    trainer = _tiny_trainer(md_file, tmp_path, model="p4inv", penalty_weight=2.0, energy_steps=0)
    assert (
        trainer.loop.p4inv_layers and float(p4inv_penalty(trainer.loop.p4inv_layers).detach()) == 0.0
    )  # inside the bounds at the start
    with torch.no_grad():  # push one layer's log|det A| far above its merge bound
        layer = trainer.loop.p4inv_layers[0]
        layer.logabsdet += 100.0
    loss, info = trainer.loop.loss(None)
    assert info["p4inv_penalty"] > 0 and torch.isfinite(loss)
    assert loss.item() == pytest.approx(info["train_nll"] + 2.0 * info["p4inv_penalty"], rel=1e-5)
    with pytest.raises(InputError, match="penalty-weight"):
        TrainSettings(penalty_weight=-1.0).validated()


def test_settings_missing_from_an_older_run_count_as_defaults():
    from dataclasses import asdict

    from bgp4.settings import changed_settings

    current = asdict(TrainSettings())
    older = {k: v for k, v in current.items() if k != "penalty_weight"}
    assert changed_settings(older, current) == []
    assert changed_settings(older, {**current, "penalty_weight": 0.1}) == ["penalty_weight"]
    before_zmatrix = {k: v for k, v in current.items() if k != "zmatrix"}  # a run of the hand-written z-matrix
    assert changed_settings(before_zmatrix, current) == []
    assert changed_settings(before_zmatrix, {**current, "zmatrix": "auto"}) == ["zmatrix"]


def test_non_finite_loss_or_gradient_skips_the_step(md_file, tmp_path):
    trainer = _tiny_trainer(md_file, tmp_path, model="p4inv")
    before = {k: v.clone() for k, v in trainer.bg.state_dict().items()}
    first = next(trainer.bg.parameters())
    nll = trainer.loop.batch_nll
    # finite loss, NaN gradient: d sqrt(x)/dx at 0 is inf, times 0
    trainer.loop.batch_nll = lambda y, ld: nll(y, ld) + torch.sqrt(first.sum() * 0.0)
    assert trainer.loop.train_step(None) is None and trainer.loop.skipped == 1
    trainer.loop.batch_nll = lambda y, ld: nll(y, ld) + float("inf")  # non-finite loss
    assert trainer.loop.train_step(None) is None and trainer.loop.skipped == 2
    after = trainer.bg.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # nothing was applied
    assert not trainer.loop.optimizer.state and trainer.loop.scheduler.steps == 0  # Adam and P4Inv did not advance
    assert all(p.grad is None for p in trainer.bg.parameters())
    trainer.loop.batch_nll = nll
    assert trainer.loop.train_step(None) is not None and trainer.loop.scheduler.steps == 1


def test_training_leaves_the_callers_random_generator_alone(md_file, tmp_path):
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    settings = TrainSettings(
        data=str(md_file),
        model="p4inv",
        merge_every=2,
        **{**TINY, "steps": 8, "energy_steps": 0, "blocks": 1, "hidden": 8},
    )
    train(settings, tmp_path / "run", progress=False)
    assert torch.equal(torch.rand(3), expected)


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
def test_plain_mdtraj_data_needs_a_temperature(md_file, tmp_path):
    plain = tmp_path / "plain.h5"
    mdtraj.load(str(md_file)).save_hdf5(str(plain))  # frames only: no bgp4 settings, no temperature
    settings = TrainSettings(data=str(plain), model="rnvp", **{**TINY, "steps": 5, "energy_steps": 0, "blocks": 1})
    with pytest.raises(InputError, match=r"records no temperature; pass temperature \(--temperature\)"):
        train(settings, tmp_path / "refused", progress=False)
    assert not (tmp_path / "refused").exists()
    summary, _ = train(replace(settings, temperature=450.0), tmp_path / "run", progress=False)
    assert summary["temperature"] == 450.0
    with pytest.raises(InputError, match=r"records 600 K, but temperature \(--temperature\) says 300 K"):
        train(replace(settings, data=str(md_file), temperature=300.0), tmp_path / "x", progress=False)


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


# ------------------------------------------------------------------ objectives: ml, mixed, kl, fab
FAB_TINY = dict(objective="fab", fab_levels=2, fab_moves=1, fab_independence=1, fab_buffer=128, fab_reuse=2)


def test_each_objective_resolves_its_own_defaults():
    paper = TrainSettings().validated()
    assert (paper.objective, paper.energy_lr, paper.clip_grad, paper.energy_steps) == ("mixed", 1e-5, 0.0, 2_000)
    assert TrainSettings(objective="ml").validated().energy_steps == 0  # likelihood only
    for objective in ("kl", "fab"):
        s = TrainSettings(objective=objective).validated()
        assert (s.energy_lr, s.clip_grad) == (1e-4, 10.0)  # a larger step and clipped gradients
    assert TrainSettings(objective="fab", energy_lr=3e-4, clip_grad=0).validated().energy_lr == 3e-4
    assert TrainSettings(model="spline").validated().clip_grad == 10.0  # the spline kinds as before
    without = TrainSettings(data="none", objective="kl", steps=0, init="somewhere").validated()
    assert without.data == "" and not without.has_data


@pytest.mark.slow
def test_kl_and_fab_train_from_a_finished_run_without_data_and_count_their_costs(md_file, tmp_path, cli, monkeypatch):
    from bgp4.generator.fab import FabSampler
    from bgp4.generator.model import load_generator

    base = TrainSettings(data=str(md_file), model="rnvp", **{**TINY, "steps": 20, "energy_steps": 0, "eval_every": 10})
    first, _ = train(base, tmp_path / "ml", progress=False)
    n_train = len(np.load(tmp_path / "ml" / "split.npz")["train"])
    assert first["objective"] == "mixed" and first["md_frames"] == n_train and first["energy_evaluations"] == 0
    common = ("--data", "none", "--init", tmp_path / "ml", "--model", "rnvp", "--blocks", "2", "--hidden", "32")
    common += ("--batch", "64", "--steps", "0", "--workers", "1", "--eval-every", "2", "--quiet")
    kl = cli("train", *common, "--objective", "kl", "--energy-steps", "3", "--out", tmp_path / "kl")
    assert kl.returncode == 0, kl.stderr
    assert "192 target energy evaluations" in kl.stdout  # 3 steps of 64 flow samples
    fab_flags = ("--fab-levels", "2", "--fab-buffer", "128", "--fab-reuse", "2")
    original, ais_evaluations = FabSampler.run, []

    def counted(self, *args, **kwargs):  # the target evaluations of every AIS run, as it reports them
        batch = original(self, *args, **kwargs)
        ais_evaluations.append(batch.evaluations)
        return batch

    monkeypatch.setattr(FabSampler, "run", counted)
    fab = cli("train", *common, "--objective", "fab", *fab_flags, "--energy-steps", "4", "--out", tmp_path / "fab")
    assert fab.returncode == 0, fab.stderr
    start = load_generator(tmp_path / "ml" / "model.pt").state_dict()
    for name, objective in (("kl", "kl"), ("fab", "fab")):
        run = RunDirectory(tmp_path / name)
        summary = run.completion()
        assert summary["objective"] == objective and summary["temperature"] == 600.0
        assert summary["md_frames"] == 0 and summary["md_frames_total"] == n_train  # the ML run's frames
        assert summary["test_nll_end"] is None and run.settings()["data"] == ""
        assert summary["energy_evaluations_total"] == summary["energy_evaluations"] > 0
        tuned = load_generator(run.file("model.pt")).state_dict()
        assert any(not torch.equal(tuned[k], start[k]) for k in start)
    records = list(RunDirectory(tmp_path / "fab").records())
    # the buffer is filled once (an eighth of 128 < one batch: one AIS batch), then one AIS batch per 2 steps
    ais = [r for r in records if r.get("flow_ess") is not None]
    assert [r["global_step"] for r in ais] == [2, 4] and all(r["buffer_size"] >= 64 for r in ais)
    for key in ("ais_acceptance", "ais_independence_acceptance"):  # both kinds of move are logged
        assert all(0.0 <= r[key] <= 1.0 for r in ais), key
    # each AIS batch: 64 samples evaluated once, then at most 2 moves of each live sample per level;
    # FAB evaluates the target in its AIS runs only, so the count is exactly theirs
    assert len(ais_evaluations) == 2 and all(64 <= n <= 64 * (1 + 2 * 2) for n in ais_evaluations)
    assert records[-1]["energy_evaluations"] == sum(ais_evaluations)
    assert RunDirectory(tmp_path / "fab").completion()["energy_evaluations"] == sum(ais_evaluations)


@pytest.mark.slow
def test_fab_resumes_exactly_after_a_kill_in_or_between_steps(md_file, tmp_path, monkeypatch):
    """The replay buffer, step sizes and the AIS and draw streams are in the checkpoint: a kill
    between steps or inside an AIS run resumes to the same model as an unbroken run."""
    from bgp4.generator.fab import FabSampler

    settings = TrainSettings(
        data=str(md_file), model="rnvp", checkpoint_minutes=1e-9, **{**TINY, "steps": 0, "energy_steps": 7}, **FAB_TINY
    )
    train(settings, tmp_path / "unbroken", progress=False)
    _killed_at(settings, tmp_path / "between", 5, monkeypatch)
    state = torch.load(tmp_path / "between" / "checkpoint.pt", weights_only=True)
    assert state["step"] == 5 and state["objective"]["replay"]["log_w"].numel() >= 128
    train(settings, tmp_path / "between", progress=False)
    _assert_same_model(tmp_path / "unbroken", tmp_path / "between")

    original, calls = FabSampler.run, []

    def killed_in_ais(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # the AIS run of step 4 (runs at steps 0, 2, 4, 6)
            raise RuntimeError("simulated kill")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(FabSampler, "run", killed_in_ais)
    with pytest.raises(RuntimeError, match="simulated kill"):
        train(settings, tmp_path / "inside", progress=False)
    monkeypatch.setattr(FabSampler, "run", original)
    train(settings, tmp_path / "inside", progress=False)
    _assert_same_model(tmp_path / "unbroken", tmp_path / "inside")
    assert (
        RunDirectory(tmp_path / "inside").completion()["energy_evaluations"]
        == (RunDirectory(tmp_path / "unbroken").completion()["energy_evaluations"])
    )


@pytest.mark.slow
def test_kl_from_scratch_uses_the_data_for_its_transform_only(md_file, tmp_path):
    settings = TrainSettings(data=str(md_file), model="rnvp", objective="kl", **{**TINY, "steps": 0, "energy_steps": 2})
    summary, _ = train(settings, tmp_path / "kl", progress=False)
    assert summary["md_frames"] == 0 and summary["energy_evaluations"] == 2 * TINY["batch"]
    assert summary["test_nll_end"] is not None  # held-out frames still score the flow
    config = torch.load(tmp_path / "kl" / "model.pt", weights_only=True)["config"]
    assert "fitted_to" not in config  # the transform came from the frames, not from a structure fit


def test_bad_objective_settings_are_refused_cleanly(md_file, tmp_path, cli):
    """Settings refused before anything runs: one line, exit code 2, nothing written."""
    tiny = ("--model", "rnvp", "--blocks", "1", "--hidden", "32", "--batch", "64", "--workers", "1")
    cases = [
        (["--data", str(md_file), "--objective", "fab2"], "objective (--objective) must be one of ml, mixed, kl, fab"),
        (["--data", str(md_file), "--objective", "fab", "--fab-levels", "-1"], "fab_levels (--fab-levels) must be in"),
        (["--data", str(md_file), "--objective", "fab", "--fab-reuse", "0"], "fab_reuse (--fab-reuse) must be in"),
        (["--data", str(md_file), "--objective", "fab", "--fab-power", "0"], "fab_power (--fab-power) must be in"),
        (["--data", str(md_file), "--objective", "fab", "--fab-leapfrog", "0"], "fab_leapfrog (--fab-leapfrog) must"),
        (["--data", str(md_file), "--objective", "fab", *tiny, "--fab-buffer", "10"], "holds less than one batch"),
        (["--data", str(md_file), "--objective", "fab", "--fab-moves", "0", "--fab-independence", "0"], "not move"),
        (["--data", str(md_file), "--objective", "kl", "--energy-lr", "-1"], "energy_lr (--energy-lr)"),
        (["--data", str(md_file), "--objective", "kl", "--clip-grad", "-3"], "clip_grad (--clip-grad)"),
        (["--data", "none", "--objective", "ml"], "objective ml (--objective) trains on MD data"),
        (["--data", "none", "--objective", "mixed", "--steps", "0"], "objective mixed (--objective) trains on MD"),
        (["--data", "none", "--objective", "kl", "--steps", "0"], "needs the molecule (--molecule NAME or --pdb"),
        (["--data", str(md_file), "--objective", "fab", "--no-fix-constrained"], "p/q is unbounded"),
        (["--data", str(md_file), "--objective", "kl", "--energy-lr", "inf"], "energy_lr (--energy-lr) must be a fin"),
        (["--data", str(md_file), "--energy-weight", "inf"], "energy_weight (--energy-weight) must be a finite"),
        (["--data", str(md_file), "--objective", "fab", "--fab-power", "nan"], "fab_power (--fab-power) must be a"),
        (["--data", str(md_file), "--lr", "inf"], "lr (--lr) must be a finite number"),
    ]
    _refused_with_nothing_written(cli, tmp_path, cases)


def _refused_with_nothing_written(cli, tmp_path, cases) -> None:
    for args, message in cases:
        line = _one_line_error(cli("train", "--out", str(tmp_path / "bad"), *args, "--quiet"))
        assert message in line, line
        assert not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_bad_inits_are_refused_cleanly(md_file, tmp_path, cli):
    import shutil

    base = TrainSettings(data=str(md_file), model="rnvp", **{**TINY, "steps": 5, "energy_steps": 0, "blocks": 1})
    train(base, tmp_path / "ml", progress=False)
    other = tmp_path / "other-molecule"  # the same run, as if trained on another molecule
    shutil.copytree(tmp_path / "ml", other)
    payload = torch.load(other / "model.pt", weights_only=True)
    payload["config"]["molecule"] = "alanine-tetrapeptide"
    torch.save(payload, other / "model.pt")
    tiny = ("--model", "rnvp", "--blocks", "1", "--hidden", "32", "--batch", "64", "--workers", "1")
    cases = [
        (["--data", "none", "--objective", "fab", "--init", str(tmp_path / "ml")], "--steps 0"),
        (["--data", str(md_file), *tiny, "--init", str(other), "--steps", "0"], "are of different molecules"),
        (
            ["--data", "none", *tiny, "--objective", "kl", "--steps", "0", "--init", str(tmp_path / "ml"), "--augment"],
            "augment=True (--augment): no MD data",
        ),
    ]
    _refused_with_nothing_written(cli, tmp_path, cases)


# ------------------------------------------------------------------ from scratch: the molecule alone
SCRATCH = dict(data="none", molecule="alanine-dipeptide", temperature=600.0, model="rnvp")


@pytest.mark.slow
def test_kl_and_fab_train_from_the_molecule_alone_and_resume_exactly(tmp_path, monkeypatch, cli):
    """No MD data, no --init: the transform is fitted to the minimized structure; every record's
    reverse KL and weights are finite, the run costs energy evaluations only, and a kill resumes
    to the same model."""
    settings = TrainSettings(**SCRATCH, **{**TINY, "steps": 0, "energy_steps": 6, "eval_every": 2}, objective="kl")
    summary, trained = train(settings, tmp_path / "kl", progress=False)
    assert trained and summary["md_frames_total"] == 0 and summary["test_nll_end"] is None
    assert summary["energy_evaluations"] == 6 * TINY["batch"] and summary["temperature"] == 600.0
    energy = [r for r in RunDirectory(tmp_path / "kl").records() if r["phase"] == "energy"]
    assert len(energy) == 3 and all(np.isfinite(r["reverse_kl"]) and r["batch_ess"] > 0 for r in energy)
    record = RunDirectory(tmp_path / "kl").settings()
    assert (record["molecule"], record["forcefield"], record["solvent"], record["constraints"]) == (
        "alanine-dipeptide",
        "amber99sb-ildn",
        "obc",
        "hbonds",
    )
    model = torch.load(tmp_path / "kl" / "model.pt", weights_only=True)["config"]
    assert model["fitted_to"] == "structure" and model["molecule"] == "alanine-dipeptide"
    _killed_at(settings, tmp_path / "killed", 3, monkeypatch)
    train(settings, tmp_path / "killed", progress=False)
    _assert_same_model(tmp_path / "kl", tmp_path / "killed")
    # the same from the command line, with FAB and a peptide by its sequence at 300 K in vacuum, every bond free
    args = ("--data", "none", "--molecule", "sequence:a", "--temperature", "300", "--solvent", "vacuum")
    args += ("--constraints", "none")
    args += ("--steps", "0", "--model", "spline", "--blocks", "1", "--hidden", "32", "--batch", "64")
    args += ("--objective", "fab", "--fab-levels", "2", "--fab-buffer", "128", "--fab-reuse", "2")
    fab = cli("train", *args, "--energy-steps", "4", "--workers", "1", "--quiet", "--out", tmp_path / "fab")
    assert fab.returncode == 0, fab.stderr
    done = RunDirectory(tmp_path / "fab")
    assert done.completion()["molecule"] == "sequence:A" and done.settings()["solvent"] == "vacuum"
    assert done.settings()["constraints"] == "none" and done.completion()["n_dims"] == 3 * 22 - 6
    assert done.completion()["energy_evaluations"] > 0
    fab_records = [r for r in done.records() if "fab_loss" in r]
    assert fab_records and all(np.isfinite(r["fab_loss"]) for r in fab_records)
    assert fab_records[-1]["skipped_steps"] == 0


def test_runs_from_scratch_refuse_what_they_cannot_do(md_file, tmp_path, cli):
    tiny = ("--model", "rnvp", "--blocks", "1", "--hidden", "32", "--batch", "64", "--steps", "0", "--quiet")
    scratch = ("--data", "none", "--objective", "kl", *tiny)
    cases = [
        (scratch, "needs the molecule (--molecule NAME or --pdb FILE"),
        ((*scratch, "--molecule", "alanine-dipeptide"), "temperature (--temperature) is needed"),
        ((*scratch, "--molecule", "alanine-dipeptide", "--pdb", "x.pdb", "--temperature", "300"), "not both"),
        ((*scratch, "--molecule", "benzene", "--temperature", "300"), "unknown molecule 'benzene'"),
        ((*scratch, "--molecule", "alanine-dipeptide", "--temperature", "300", "--solvent", "water"), "solvent"),
        ((*scratch, "--pdb", str(tmp_path / "none.pdb"), "--temperature", "300"), "no structure file at"),
        (("--data", "none", "--objective", "ml", "--molecule", "alanine-dipeptide"), "objective ml (--objective)"),
        (("--data", str(md_file), "--objective", "kl", "--molecule", "alanine-dipeptide"), "the data file (--data)"),
        (("--data", str(md_file), "--constraints", "none"), "constraints (--constraints) is for a run from scratch"),
        (
            (*scratch, "--molecule", "alanine-dipeptide", "--temperature", "300", "--constraints", "hbonds")
            + ("--no-fix-constrained",),
            "p/q is unbounded",
        ),
    ]
    for args, message in cases:
        line = _one_line_error(cli("train", "--out", str(tmp_path / "bad"), *args))
        assert message in line, line
        assert not (tmp_path / "bad").exists()


def test_energy_phase_learning_rate_is_constant_or_decays_over_its_own_steps():
    """--energy-lr-schedule cosine decays the energy phase's rate from --energy-lr to 1 % of it over
    --energy-steps, counted from the phase's start; constant (the default) keeps it."""
    from types import SimpleNamespace

    from bgp4.generator.loop import TrainingLoop

    settings = TrainSettings(
        model="spline", steps=100, energy_steps=50, objective="fab", energy_lr_schedule="cosine"
    ).validated()
    assert settings.energy_lr == 1e-4 and settings.lr_schedule == "cosine"

    def rate(step: int, s=settings) -> float:
        return TrainingLoop.learning_rate(SimpleNamespace(s=s, step=step, phase="ml" if step < s.steps else "energy"))

    assert rate(0) == pytest.approx(1e-3) and rate(99) == pytest.approx(1e-5, rel=0.03)
    assert (
        rate(100) == pytest.approx(1e-4) and rate(125) == pytest.approx(0.505e-4) and rate(150) == pytest.approx(1e-6)
    )
    constant = replace(settings, energy_lr_schedule="constant")
    assert rate(125, constant) == rate(150, constant) == pytest.approx(1e-4)
    with pytest.raises(InputError, match=r"--energy-lr-schedule\) must be one of constant, cosine"):
        TrainSettings(objective="fab", energy_lr_schedule="step").validated()


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


def test_weight_decay_shrinks_the_weight_matrices_alone_and_only_in_the_likelihood_phase(md_file, tmp_path):
    for model in ("p4inv", "spline"):  # affine couplings (w1..w3, b1..b3, scale) and P4Inv; nn.Linear conditioners
        (tmp_path / model).mkdir()
        trainer = _tiny_trainer(md_file, tmp_path / model, model=model, weight_decay=0.5, energy_steps=0)
        loop = trainer.loop
        assert isinstance(loop.optimizer, torch.optim.AdamW)
        before = {name: p.detach().clone() for name, p in trainer.bg.named_parameters()}
        for p in trainer.bg.parameters():
            p.grad = torch.zeros_like(p)  # Adam's own update is then 0: what moves is the decay alone
        loop.optimizer.step()
        shrink = 1.0 - TrainSettings().lr * 0.5
        leaves, decayed = set(), set()
        for name, p in trainer.bg.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            matrix = leaf in ("weight", "w1", "w2", "w3")
            torch.testing.assert_close(p.detach(), before[name] * shrink if matrix else before[name], msg=name)
            leaves, decayed = leaves | {leaf}, decayed | ({leaf} if matrix else set())
        assert decayed == ({"w1", "w2", "w3"} if model == "p4inv" else {"weight"})
        assert leaves - decayed >= ({"b1", "b2", "b3", "scale", "u", "v"} if model == "p4inv" else {"bias"})
    loop.step = loop.s.steps  # the energy phase
    loop.make_optimizer()
    assert type(loop.optimizer) is torch.optim.Adam  # the energy phase keeps plain Adam
    (tmp_path / "plain").mkdir()
    assert type(_tiny_trainer(md_file, tmp_path / "plain").loop.optimizer) is torch.optim.Adam
    for bad in (-0.1, 1000.0, float("nan")):
        with pytest.raises(InputError, match=r"weight_decay \(--weight-decay\)"):
            TrainSettings(weight_decay=bad).validated()
    assert TrainSettings(weight_decay=50.0).validated().weight_decay == 50.0
    assert TrainSettings(weight_decay=3.0, steps=0, objective="kl").validated().weight_decay == 0.0  # no ML phase


def test_threads_sets_torchs_threads_for_the_command_and_refuses_zero(cli):
    before = torch.get_num_threads()
    wanted = before + 1  # a count torch does not already have, on any machine
    try:
        assert cli("--threads", str(wanted), "train", "--help").returncode == 0
        assert torch.get_num_threads() == wanted
    finally:
        torch.set_num_threads(before)
    bad = cli("--threads", "0", "train", "--help")
    assert bad.returncode == 2 and "--threads" in bad.stderr
