"""Helpers of the training tests (test_train_*.py): tiny settings, a simulated kill, a small Trainer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bgp4.generator.rundir import RunDirectory
from bgp4.generator.train import Trainer, TrainSettings, train

TINY = dict(blocks=2, hidden=32, batch=64, steps=150, energy_steps=10, eval_every=50, workers=1)


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


def _tiny_trainer(md_file, tmp_path, **overrides):
    from bgp4.simulation.data import load_trajectory

    settings = TrainSettings(
        data=str(md_file), **{**TINY, "blocks": 1, "hidden": 8, "compile": "off", **overrides}
    ).validated()
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    return Trainer(settings, run, load_trajectory(settings.data))
