"""Training's settings: config file and flags, validation, bad input refused in one line, --threads."""

from __future__ import annotations

import json
from dataclasses import replace

import mdtraj
import numpy as np
import pytest
import torch
from _cli_helpers import _one_line_error
from _train_helpers import TINY

from bgp4.errors import InputError
from bgp4.generator.train import TrainSettings, train


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
        (["--data", str(garbage)], f"{garbage} is not an mdtraj HDF5 trajectory file"),  # PyTables' noise left out
        (["--data", str(tmp_path)], "is a directory, not a data file"),
        (["--data", str(small)], "atoms"),
        (["--data", str(md_file), "--batch", "100000"], "fewer than one batch"),
        (["--data", str(md_file), "--steps", "-5"], "--steps"),
        (["--data", str(md_file), "--model", "glow"], "unknown model"),
        (["--data", str(md_file), "--seed", "-1"], "--seed"),
        (["--data", str(md_file), "--test-fraction", "0.0001"], "no test frames"),
    ]
    for args, message in cases:
        line = _one_line_error(cli("train", "--out", str(tmp_path / "bad"), *args, "--quiet"))
        assert message in line and "back trace" not in line, line


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


def test_overwrite_refuses_a_directory_that_is_not_a_run(md_file, tmp_path, cli):
    precious = tmp_path / "notes"
    precious.mkdir()
    (precious / "thesis.tex").write_text("keep me")
    result = cli("train", "--data", str(md_file), "--out", str(precious), "--overwrite", "--quiet")
    assert "not a bgp4 run directory" in _one_line_error(result)
    assert (precious / "thesis.tex").read_text() == "keep me"


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
        assert message in line and "back trace" not in line, line
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
