"""Refinement of a generator's samples: the molecule's target, `bgp4 sample --refine`, its guards and hints."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

# Toy batches are tiny: torch's thread wake-ups would cost more than the arithmetic.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--refine", "-1"], "--refine"),
        (["--refine", "3", "--resample-ess", "2"], "--resample-ess"),
        (["--refine", "3", "--refine-steps", "0", "--refine-independence", "0"], "both 0"),
        (["--refine", "3", "--refine-independence", "-1"], "--refine-independence"),
        (["--refine", "3"], "no finished training run"),
    ],
)
def test_cli_bad_input_is_one_line_and_touches_nothing(tmp_path, args, message):
    from bgp4.cli import app

    run = tmp_path / "run"
    run.mkdir()
    (run / "settings.json").write_text(json.dumps({"model": "rnvp"}))  # a run that never finished
    before = sorted(p.name for p in run.iterdir())
    result = CliRunner().invoke(app, ["sample", str(run), "--n", "100", *args])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0]
    assert sorted(p.name for p in run.iterdir()) == before


@pytest.mark.slow
def test_molecule_path_on_a_tiny_generator(molecule, md_frames):
    from bgp4.generator.model import build_generator
    from bgp4.generator.refine import GeneratorTarget, anneal
    from bgp4.simulation.energy import OpenMMEnergy

    torch.manual_seed(0)
    bg = build_generator("rnvp", data=md_frames[0], blocks=2, hidden=16, fix_constrained=True).eval()
    for p in bg.parameters():
        p.requires_grad_(False)
    with OpenMMEnergy(molecule.system, 600.0, n_workers=1) as energy:
        result = anneal(bg, energy, 200, 3, steps=2, pilot=50, seed=0)  # and one independence move per level
        assert result.n_evals == 200 * (1 + 3 * (2 + 1)) + 50 * (1 + 3 * (3 + 1))
        assert result.x.shape == (200, 22, 3) and np.all(np.isfinite(result.acceptance))
        live = torch.isfinite(result.log_w)
        assert live.any()
        # the final samples' cached energies are those of their positions
        u = energy.reduced_energy(result.x[live][:20].double())
        assert torch.allclose(u, result.u[live][:20], rtol=1e-4, atol=1e-3)
        zero = anneal(bg, energy, 100, 0, seed=1)
        direct = GeneratorTarget(bg, energy).evaluate(zero.z, grad=False)
        assert torch.equal(zero.log_w, zero.raw_log_w) and torch.equal(zero.log_w, direct.log_ratio)
        # in slices of rows (bounded memory), with forces and the flow's backward pass: the same values
        import bgp4.generator.rows as rows

        whole = GeneratorTarget(bg, energy).evaluate(zero.z, grad=True)
        saved, rows.ROWS = rows.ROWS, 32
        try:
            sliced = GeneratorTarget(bg, energy).evaluate(zero.z, grad=True)
        finally:
            rows.ROWS = saved
        live = torch.isfinite(whole.log_ratio)
        assert torch.equal(torch.isfinite(sliced.log_ratio), live) and torch.equal(sliced.aux["ok"], whole.aux["ok"])
        for a, b in [(sliced.log_ratio[live], whole.log_ratio[live]), (sliced.grad_ratio, whole.grad_ratio)]:
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from bgp4.generator.train import TrainSettings, train
    from bgp4.simulation.md import MDSettings, simulate

    root = tmp_path_factory.mktemp("refine")
    data = root / "ala2.h5"
    simulate(data, MDSettings(frames=2000, equilibration_ps=2.0, replicas=2, seed=5), progress=False)
    run = root / "rnvp"
    train(
        TrainSettings(
            data=str(data),
            model="rnvp",
            blocks=2,
            hidden=16,
            batch=64,
            steps=60,
            energy_steps=0,
            eval_every=30,
            workers=1,
            fix_constrained=True,
        ),
        run,
        progress=False,
    )
    return data, run


@pytest.mark.slow
def test_cli_refine_zero_reproduces_raw_weights_and_analyze_lists_both(tiny_run, tmp_path):
    from bgp4.cli import app
    from bgp4.generator.sample import SAMPLE_EXTRAS
    from bgp4.simulation.data import load_trajectory

    data, run = tiny_run
    result = CliRunner().invoke(
        app, ["sample", str(run), "--n", "300", "--batch", "120", "--workers", "1", "--refine", "0", "--quiet"]
    )
    assert result.exit_code == 0, result.output
    raw = load_trajectory(run / "samples.h5", 22, extras=SAMPLE_EXTRAS)
    refined = load_trajectory(run / "samples-refined.h5", 22, extras=SAMPLE_EXTRAS)
    assert np.array_equal(raw.extras["log_w"], refined.extras["log_w"])
    assert np.array_equal(raw.xyz, refined.xyz)
    assert refined.settings["energy_evals"] == 300 and refined.settings["acceptance"] == []
    report = tmp_path / "report"
    result = CliRunner().invoke(app, ["analyze", str(run), "--data", str(data), "--out", str(report), "--workers", "1"])
    assert result.exit_code == 0, result.output
    models = json.loads((report / "metrics.json").read_text())["models"]
    assert set(models) == {"rnvp", "rnvp +AIS(0)"}
    # the same weights (the two files' log w are equal above), equal to rounding
    assert models["rnvp"]["reverse_ess"] == pytest.approx(models["rnvp +AIS(0)"]["reverse_ess"], rel=1e-6)
    assert "energy evaluations per sample" in (report / "report.md").read_text()


@pytest.mark.slow
def test_cli_smc_keeps_lineages_and_analyze_reports_their_ess(tiny_run, tmp_path):
    import shutil

    from bgp4.cli import app
    from bgp4.generator.sample import REFINED_EXTRAS
    from bgp4.simulation.data import load_trajectory

    data, shared = tiny_run
    run = shutil.copytree(shared, tmp_path / "rnvp", ignore=shutil.ignore_patterns("samples*"))
    result = CliRunner().invoke(
        app,
        [
            "sample",
            str(run),
            "--n",
            "300",
            "--batch",
            "150",
            "--workers",
            "1",
            "--refine",
            "3",
            "--resample-ess",
            "1",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    refined = load_trajectory(run / "samples-refined.h5", 22, extras=REFINED_EXTRAS)
    ancestor = refined.extras["ancestor"]
    assert refined.settings["resampled_levels"] > 0
    # lineages are numbered across the two batches: each batch's copies descend from its own samples
    assert set(ancestor[:150]) <= set(range(150)) and set(ancestor[150:]) <= set(range(150, 300))
    assert len(set(ancestor)) < 300
    summary = json.loads(refined.settings["summary"])
    assert summary["lineages"] == len(set(ancestor)) and summary["lineage_ess"] <= summary["reverse_ess"]
    report = tmp_path / "report"
    result = CliRunner().invoke(app, ["analyze", str(run), "--data", str(data), "--out", str(report), "--workers", "1"])
    assert result.exit_code == 0, result.output
    models = json.loads((report / "metrics.json").read_text())["models"]
    assert "reverse_ess_lineage" not in models["rnvp"]
    assert models["rnvp +AIS(3)"]["reverse_ess_lineage"] == pytest.approx(summary["lineage_ess"], rel=1e-6)
    assert "reverse ESS by SMC lineage" in (report / "report.md").read_text()


@pytest.mark.slow
def test_killed_refinement_resumes_to_the_same_file(tiny_run, tmp_path, monkeypatch):
    import bgp4.generator.refine as refine_module
    from bgp4.generator.sample import SAMPLE_EXTRAS, RefineSettings, SampleSettings, refine_run, sample_run
    from bgp4.simulation.data import load_trajectory

    _, run = tiny_run
    s, r = SampleSettings(n=200, batch=100, workers=1), RefineSettings(levels=3, steps=1, pilot=50)
    outs = {}
    for name in ("whole", "resumed"):
        out = tmp_path / name / "samples.h5"
        sample_run(run, s, out, progress=False)
        if name == "resumed":
            calls, step = [0], refine_module._hmc_step

            def dies_in_batch_two(*args):
                calls[0] += 1
                if calls[0] == 3 * 3 + 3 + 2:  # pilot: 3 levels x 3 moves; batch 1: 3; then into batch 2
                    raise KeyboardInterrupt
                return step(*args)

            monkeypatch.setattr(refine_module, "_hmc_step", dies_in_batch_two)
            with pytest.raises(KeyboardInterrupt):
                refine_run(run, s, r, out, progress=False)
            state = sorted(p.name for p in (tmp_path / name / "samples-refined.state").iterdir())
            assert state == ["batch-00000.npz", "batch-00001.npz", "plan.json"]
            monkeypatch.setattr(refine_module, "_hmc_step", step)
        summary, fresh = refine_run(run, s, r, out, progress=False)
        assert fresh and not (tmp_path / name / "samples-refined.state").exists()
        outs[name] = load_trajectory(tmp_path / name / "samples-refined.h5", 22, extras=SAMPLE_EXTRAS)
    a, b = outs["whole"], outs["resumed"]
    assert np.array_equal(a.extras["log_w"], b.extras["log_w"]) and np.array_equal(a.xyz, b.xyz)
    # per level: one independence move (the default), then one MALA move; the pilot makes three
    assert a.settings["energy_evals"] == b.settings["energy_evals"] == 50 * (1 + 3 * 4) + 200 * (1 + 3 * 2)
    assert len(a.settings["independence_acceptance"]) == 3
    assert len(a.settings["acceptance"]) == 3 and summary["evals_per_sample"] == pytest.approx(
        a.settings["evals_per_sample"]
    )


@pytest.mark.slow
def test_cli_refinement_by_independence_moves_alone(tiny_run, tmp_path):
    """--refine-steps 0: no pilot, no gradients, one energy evaluation per sample and level."""
    import shutil

    from bgp4.cli import app
    from bgp4.generator.sample import REFINED_EXTRAS
    from bgp4.simulation.data import load_trajectory

    _, shared = tiny_run
    run = shutil.copytree(shared, tmp_path / "rnvp", ignore=shutil.ignore_patterns("samples*"))
    result = CliRunner().invoke(
        app, ["sample", str(run), "--n", "200", "--workers", "1", "--refine", "4", "--refine-steps", "0", "--quiet"]
    )
    assert result.exit_code == 0, result.output
    settings = load_trajectory(run / "samples-refined.h5", 22, extras=REFINED_EXTRAS).settings
    assert settings["pilot_evals"] == 0 and settings["energy_evals"] == 200 * (1 + 4)
    assert np.all(np.isnan(settings["acceptance"])) and np.all(np.isfinite(settings["independence_acceptance"]))
    rate = json.loads(settings["summary"])["final_independence_acceptance"]
    assert rate == pytest.approx(settings["independence_acceptance"][-1])


def test_refine_note_names_the_fix():
    from bgp4.generator.refine import STALLED_INDEPENDENCE
    from bgp4.generator.refine import refine_note as _refine_note

    fine = {"reverse_ess": 0.9, "final_independence_acceptance": 0.6}
    assert _refine_note(0.5, fine, steps=0) is None and _refine_note(None, fine, steps=1) is None
    assert _refine_note(0.9, {"reverse_ess": 0.85}, steps=0) is None  # within noise of the raw ESS
    smc = {"reverse_ess": 0.9, "lineage_ess": 0.05}  # resampling evened the weights, the lineages collapsed
    assert "--refine-steps 1" in _refine_note(0.5, smc, steps=0)
    worse = {"reverse_ess": 0.002, "final_independence_acceptance": 0.6}
    assert "--refine-steps 1" in _refine_note(0.17, worse, steps=0)
    assert "more levels" in _refine_note(0.17, worse, steps=1)
    stalled = {"reverse_ess": 0.6, "final_independence_acceptance": STALLED_INDEPENDENCE / 2}
    assert "accepted in only" in _refine_note(0.5, stalled, steps=0) and _refine_note(0.5, stalled, steps=1) is None


def test_the_pipeline_shows_the_refinement_hint_as_sample_does(monkeypatch, tmp_path):
    from bgp4 import pipeline
    from bgp4.generator import sample
    from bgp4.generator.refine import STALLED_INDEPENDENCE
    from bgp4.settings import RefineSettings, SampleSettings

    stalled = {"reverse_ess": 0.6, "final_independence_acceptance": STALLED_INDEPENDENCE / 2}
    monkeypatch.setattr(sample, "refine_run", lambda run, s, r, progress, renew: (stalled, True))
    said = []
    refine = RefineSettings(levels=5, steps=0)
    pipeline._refine(tmp_path / "spline", SampleSettings(), refine, 0.5, progress=False, say=said.append)
    assert said[0].startswith("refine spline: done; AIS with 5 levels")
    assert said[1].startswith("note: the generator's own draws were accepted in only")
    said.clear()
    pipeline._refine(
        tmp_path / "spline", SampleSettings(), RefineSettings(levels=5), 0.5, progress=False, say=said.append
    )
    assert len(said) == 1  # with MALA moves the same figures need no hint
