"""Sampling, analysis and the pipeline on a tiny real run."""

from __future__ import annotations

import dataclasses
import json
import shutil

import mdtraj
import numpy as np
import openmm
import pytest
import torch

from bgp4.analysis.metrics import REWEIGHTED_KEYS
from bgp4.errors import InputError
from bgp4.flows.coordinates import LOG_Q
from bgp4.generator.sample import SAMPLE_EXTRAS, SampleSettings, _kept, refine_run, sample_run
from bgp4.generator.train import TrainSettings, train
from bgp4.report.analyze import NOT_DEFINED, PREDATES_CHECK, analyze, weights_status
from bgp4.settings import RefineSettings
from bgp4.simulation.data import load_trajectory, write_trajectory
from bgp4.simulation.md import MDSettings, simulate

TINY = dict(blocks=2, hidden=32, batch=64, steps=100, energy_steps=5, eval_every=50, workers=1)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """MD data and a trained, sampled p4inv run. Its cost (seconds) puts every test that uses it in `slow`."""
    root = tmp_path_factory.mktemp("pipeline")
    data = root / "ala2.h5"
    simulate(data, MDSettings(frames=2000, equilibration_ps=2.0, replicas=2, seed=5), progress=False)
    run = root / "p4inv"
    train(TrainSettings(data=str(data), model="p4inv", **TINY), run, progress=False)
    sample_run(run, SampleSettings(n=600, batch=250, workers=1), progress=False)
    return data, run


@pytest.mark.slow
def test_samples_file_holds_energies_and_weights(trained_run, molecule):
    _, run = trained_run
    path = run / "samples.h5"
    assert mdtraj.load(str(path)).n_frames == 600
    s = load_trajectory(path, 22, extras=SAMPLE_EXTRAS)
    assert s.settings["constraints"] == "hbonds" and s.settings["solvent"] == "obc"  # the system travels
    assert s.molecule().record() == molecule.record()
    kT = molecule.kT(600.0)
    finite, ok = s.extras["finite"].astype(bool), s.extras["in_domain"].astype(bool)
    good = finite & ok
    assert good.sum() > 0
    expected = -s.energies[good] / kT - s.extras["log_q"][good]
    assert np.allclose(s.extras["log_w"][good], expected, rtol=1e-4, atol=1e-2)
    assert np.all(np.isneginf(s.extras["log_w"][~good]))
    context = openmm.Context(
        molecule.system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference")
    )
    for i in np.flatnonzero(finite)[:5]:
        context.setPositions(s.xyz[i].astype(np.float64))
        e = context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole)
        assert s.energies[i] == pytest.approx(e, rel=1e-3, abs=0.5)


@pytest.mark.slow
def test_sampling_is_skipped_when_complete_and_refused_with_other_settings(trained_run):
    _, run = trained_run
    summary, sampled = sample_run(run, SampleSettings(n=600, batch=250, workers=1), progress=False)
    assert not sampled and summary["samples"] == 600
    with pytest.raises(InputError, match="other settings"):
        sample_run(run, SampleSettings(n=700, batch=250, workers=1), progress=False)
    # drawn with device "auto": an explicit request for the device auto chose here asks for the same file
    here = "cuda" if torch.cuda.is_available() else "cpu"
    assert load_trajectory(run / "samples.h5").settings["device"] == here
    _, sampled = sample_run(run, SampleSettings(n=600, batch=250, workers=1, device=here), progress=False)
    assert not sampled


def test_samples_drawn_before_the_orbit_volume_are_not_kept(molecule, tmp_path):
    """A samples file without the log q convention (drawn before the rigid block's orbit volume was
    part of log q) has other weights: `bgp4 sample` refuses it; the stages that own their runs
    (pipeline, sweep: `renew`) draw it again, but only when nothing else differs; one with today's
    record is kept."""
    out = tmp_path / "samples.h5"
    record = {"kind": "samples", "n": 2, "log_q": LOG_Q, "summary": json.dumps({"samples": 2})}
    older = {k: v for k, v in record.items() if k != "log_q"}
    frames = [{"coordinates": molecule.positions[None].repeat(2, 0).astype(np.float32)}]
    request = {k: v for k, v in record.items() if k != "summary"}
    write_trajectory(out, molecule.topology, frames, older)
    with pytest.raises(InputError, match="other settings.*log_q"):
        _kept(out, request, overwrite=False, renew=False)
    assert _kept(out, request, overwrite=False, renew=True) is None
    with pytest.raises(InputError, match=r"other settings \(n, log_q\)"):
        _kept(out, {**request, "n": 3}, overwrite=False, renew=True)
    # a file of a later version (another log q convention) is not an older bgp4's to replace
    write_trajectory(out, molecule.topology, frames, {**record, "log_q": "a later convention"})
    with pytest.raises(InputError, match="other settings.*log_q"):
        _kept(out, request, overwrite=False, renew=True)
    write_trajectory(out, molecule.topology, frames, record)
    assert _kept(out, request, overwrite=False, renew=False) == {"samples": 2}
    assert _kept(out, request, overwrite=False, renew=True) == {"samples": 2}


def test_a_partial_refinement_of_an_earlier_version_is_cleared_only_when_renewed(tmp_path):
    """The chain store of a refinement stopped under an older log q: kept and refused by
    `bgp4 sample`, cleared by `renew` (pipeline, sweep) when nothing else differs, and by overwrite."""
    from bgp4.generator.refine import ChainStore
    from bgp4.generator.sample import _resumable

    record = {"kind": "refined-samples", "n": 2, "refine_levels": 4, "log_q": LOG_Q}
    older = {k: v for k, v in record.items() if k != "log_q"}

    def saved(plan_record: dict) -> ChainStore:
        store = ChainStore(tmp_path / "samples-refined.state")
        store.save_plan(plan_record, np.full(4, 0.5), 0)
        return store

    with pytest.raises(InputError, match="partial refinement with other settings \\(log_q\\)"):
        _resumable(saved(older), record, overwrite=False, renew=False)
    assert _resumable(saved(older), record, overwrite=False, renew=True).plan() is None
    with pytest.raises(InputError, match="other settings \\(log_q, n\\)"):
        _resumable(saved({**older, "n": 3}), record, overwrite=False, renew=True)
    assert _resumable(saved({**older, "n": 3}), record, overwrite=True, renew=False).plan() is None
    assert _resumable(saved(record), record, overwrite=False, renew=True).plan()["record"] == record


@pytest.mark.slow
def test_same_seed_same_samples(trained_run, tmp_path):
    _, run = trained_run
    a = tmp_path / "a.h5"
    b = tmp_path / "b.h5"
    for out in (a, b):
        sample_run(run, SampleSettings(n=50, batch=20, seed=3, workers=1), out=out, progress=False)
    assert np.array_equal(load_trajectory(a).xyz, load_trajectory(b).xyz)


def test_weights_status_from_complete_json():
    assert weights_status({}) == (False, PREDATES_CHECK)
    assert weights_status({"weights_defined": True, "weights_note": ""}) == (True, None)
    assert weights_status({"weights_defined": False, "weights_note": "bond 8-9 is a flow dimension"}) == (
        False,
        "bond 8-9 is a flow dimension",
    )
    defined, note = weights_status({"weights_defined": False})
    assert not defined and note


@pytest.mark.slow
def test_analyze_writes_figures_metrics_and_report(trained_run, tmp_path, monkeypatch):
    from bgp4.analysis import plots

    data, run = trained_run
    # The same run marked as holding every constrained bond fixed (what train writes now).
    fixed = tmp_path / "p4inv-fixed"
    shutil.copytree(run, fixed)
    legacy = tmp_path / "legacy" / run.name  # the same run as written before train recorded weights_defined
    shutil.copytree(run, legacy)
    stripped = {
        k: v for k, v in json.loads((legacy / "complete.json").read_text()).items() if not k.startswith("weights_")
    }
    (legacy / "complete.json").write_text(json.dumps(stripped))
    complete = json.loads((fixed / "complete.json").read_text())
    (fixed / "complete.json").write_text(json.dumps({**complete, "weights_defined": True, "weights_note": None}))
    curves: list[str] = []
    drawn = plots.free_energy_phi
    monkeypatch.setattr(plots, "free_energy_phi", lambda c, path: curves.extend(c) or drawn(c, path))

    metrics = analyze(data, [legacy, fixed], tmp_path / "report", workers=1)
    old, new = metrics["models"]["p4inv"], metrics["models"]["p4inv-fixed"]
    assert metrics["ramachandran_bins"] == 64
    for model in (old, new):
        assert model["n_samples"] == 600
        for key in (
            "mean_energy_kT",
            "energy_shift_kT",
            "energy_w2",
            "low_energy_fraction",
            "ramachandran_kl",
            "ramachandran_tv",
            "ramachandran_kl_floor",
            "ramachandran_tv_floor",
            "p_phi_positive",
            "dF_phi_kT",
            "dF_phi_error_kT",
            "test_nll",
        ):
            assert model[key] is not None, key
    # A run without `weights_defined` predates the constraint check: nulls and the note.
    assert old["weights_defined"] is False and old["weights_note"] == PREDATES_CHECK
    assert all(old[key] is None for key in REWEIGHTED_KEYS)
    assert all(
        new[key] is not None
        for key in (
            "reverse_ess",
            "reverse_ess_ci_low",
            "reverse_ess_ci_high",
            "energy_w2_reweighted",
            "ramachandran_tv_reweighted",
        )
    )
    assert new["reverse_ess_ci_low"] <= new["reverse_ess"] <= new["reverse_ess_ci_high"]
    assert "p4inv-fixed reweighted" in curves and "p4inv reweighted" not in curves
    assert metrics["md"]["low_energy_fraction"] > 0.99
    assert 0 <= metrics["md"]["p_phi_positive"] <= 1
    assert metrics["md_noise_0.004nm"]["energy_shift_kT"] > 5.0
    for stem in ("energies", "ramachandran", "free_energy_phi"):
        for ext in ("png", "pdf"):
            assert (tmp_path / "report" / f"{stem}.{ext}").stat().st_size > 1000
    assert json.loads((tmp_path / "report" / "metrics.json").read_text())["models"]["p4inv"]["n_samples"] == 600
    report = (tmp_path / "report" / "report.md").read_text()
    assert "| metric | p4inv | p4inv-fixed |" in report and "energies.png" in report
    assert "## Metrics" in report and "Ramachandran TV" in report and "floor" in report
    ess_row = next(line for line in report.splitlines() if line.startswith("| reverse ESS"))
    assert ess_row.split(" | ")[1] == "not defined" and "N = 600" in ess_row.split(" | ")[2]
    assert PREDATES_CHECK in report
    # The table's metrics: clipped ESS, forward ESS on the run's held-out frames, the costs.
    assert new["reverse_ess_clipped"] >= new["reverse_ess"] and old["reverse_ess_clipped"] is None
    assert 0 < new["forward_ess"] <= 1 and old["forward_ess"] is None and old["forward_ess_note"]
    test_frames = np.load(fixed / "split.npz")["test"]
    assert new["forward_ess_frames"] == test_frames.size
    complete = json.loads((fixed / "complete.json").read_text())
    assert new["train_energy_evaluations"] == complete.get("energy_evaluations_total", complete["energy_evaluations"])
    assert new["sample_energy_evaluations"] == 600
    assert new["train_md_frames"] == np.load(fixed / "split.npz")["train"].size
    assert new["train_md_frames_energy_evaluations"] == 10 * new["train_md_frames"]  # MDSettings' save_every
    assert new["md_energy_evaluations"] == 2000 * 10 + 2 * 1000  # the whole file: 2 replicas, 2 ps at 2 fs each
    for row in ("| reverse ESS, top 1e-4", "| forward ESS on held-out", "| target energy evaluations"):
        assert row in report, row
    # Alanine dipeptide's one residue: its per-residue block is the flat single pair's.
    assert metrics["torsion_pair"] == "ALA2" and list(new["residues"]) == ["ALA2"]
    assert new["residues"]["ALA2"] == {k: new[k] for k in new["residues"]["ALA2"]}
    md_residue = metrics["md"]["residues"]["ALA2"]
    assert md_residue["p_phi_positive"] == metrics["md"]["p_phi_positive"]
    assert md_residue["p_phi_positive_se"] == metrics["md"]["p_phi_positive_se"] > 0  # two replicas, 20 blocks
    assert "ramachandran_residues" not in metrics["figures"]  # its one residue is in the Ramachandran figure
    residue_rows = [line for line in report.splitlines() if line.startswith("| ALA2 |")]
    assert len(residue_rows) == 6 and "## Per residue" in report
    p_row = next(line for line in residue_rows if line.startswith("| ALA2 | P(phi > 0) |"))
    assert " ± " in p_row.split(" | ")[2]  # the MD value with its block error
    reweighted = next(line for line in residue_rows if "P(phi > 0), reweighted" in line).split(" | ")
    assert reweighted[3] == NOT_DEFINED and reweighted[4].startswith(f"{new['p_phi_positive_reweighted']:.3g}")


@pytest.mark.slow
def test_held_out_log_q_is_the_runs_test_likelihood(trained_run):
    """The forward ESS's log q of held-out MD frames, from model.pt: its mean is the test NLL training logged."""
    from bgp4.report.costs import held_out_log_q

    data, run = trained_run
    frames, log_q = held_out_log_q(run, load_trajectory(data).xyz, seed=3)
    assert np.array_equal(frames, np.load(run / "split.npz")["test"])  # fewer than 10,000: all of them
    complete = json.loads((run / "complete.json").read_text())
    assert -log_q.mean() == pytest.approx(complete["test_nll_end"], abs=1e-3)
    some, _ = held_out_log_q(run, load_trajectory(data).xyz, n=50)
    assert some.size == 50 and np.isin(some, frames).all()


@pytest.mark.slow
def test_analyze_without_a_peptide_backbone(trained_run, tmp_path, monkeypatch):
    """A molecule with no residue that has both phi and psi: energies and weights only, one line says why."""
    from bgp4.analysis.metrics import PAIR_KEYS
    from bgp4.report import analyze as stage

    data, run = trained_run
    monkeypatch.setattr(stage, "residue_torsions", lambda molecule: [])
    monkeypatch.setattr(stage, "_own_pair", lambda molecule, torsions: None)
    metrics = stage.analyze(data, [run], tmp_path / "report", workers=1)
    model = metrics["models"]["p4inv"]
    assert metrics["torsion_pair"] is None and metrics["md"]["residues"] == {} and model["residues"] == {}
    assert all(model[k] is None for k in PAIR_KEYS) and model["mean_energy_kT"] is not None
    assert "p_phi_positive" not in metrics["md"]
    assert list(metrics["figures"]) == ["energies"]
    report = (tmp_path / "report" / "report.md").read_text()
    assert "has no peptide backbone" in report and "Ramachandran TV (MD floor)" not in report
    assert "| reverse ESS" in report and "ramachandran.png" not in report


@pytest.mark.slow
def test_analyze_refuses_run_without_samples_and_other_molecule(trained_run, tmp_path, cli):
    data, run = trained_run
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "settings.json").write_text("{}")
    result = cli("analyze", str(empty), "--data", str(data), "--out", str(tmp_path / "r"))
    assert result.returncode == 2 and "no samples" in result.stderr and "Traceback" not in result.stderr
    water = tmp_path / "water.h5"
    top = mdtraj.Topology()
    residue = top.add_residue("HOH", top.add_chain())
    for name in ("O", "H1", "H2"):
        top.add_atom(name, mdtraj.element.get_by_symbol(name[0]), residue)
    mdtraj.Trajectory(np.zeros((5, 3, 3), dtype=np.float32), top).save_hdf5(str(water))
    result = cli("analyze", str(run), "--data", str(water), "--out", str(tmp_path / "r"))
    assert result.returncode == 2 and "atoms" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    # Same atoms, another system: the MD without constraints is another target for the weights.
    free = tmp_path / "free.h5"
    simulate(free, MDSettings(frames=20, equilibration_ps=0.1, replicas=1, constraints="none"), progress=False)
    result = cli("analyze", str(run), "--data", str(free), "--out", str(tmp_path / "r"))
    assert result.returncode == 2 and "constraints none vs hbonds" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "r").exists()


def test_sample_refuses_unfinished_run(tmp_path, cli):
    result = cli("sample", str(tmp_path / "nothing"))
    assert result.returncode == 2 and "is not a bgp4 run directory" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "nothing").exists()
    started = tmp_path / "started"  # a training run that has begun but not finished
    started.mkdir()
    (started / "settings.json").write_text(json.dumps(dataclasses.asdict(TrainSettings())))
    result = cli("sample", str(started))
    assert result.returncode == 2 and "holds no finished training run" in result.stderr, result.stderr
    assert sorted(p.name for p in started.iterdir()) == ["settings.json"]  # nothing written


@pytest.mark.slow
def test_pipeline_runs_and_skips_complete_stages(tmp_path, monkeypatch):
    from bgp4 import pipeline

    tiny = {
        "md": {"frames": 600, "equilibration_ps": 1.0, "replicas": 2},
        "train": {**TINY, "steps": 20, "energy_steps": 2, "eval_every": 10},
        "sample": {"n": 200, "batch": 100, "workers": 1},
        "models": ("rnvp", "p4inv"),
        "refine": {"p4inv": {"levels": 2, "steps": 0, "pilot": 10}},
    }
    monkeypatch.setitem(pipeline.PRESETS, "tiny", tiny)
    said: list[str] = []
    metrics = pipeline.run_pipeline("tiny", tmp_path / "out", progress=False, say=said.append)
    assert set(metrics["models"]) == {"rnvp", "p4inv", "p4inv +AIS(2)"}
    assert (tmp_path / "out" / "runs" / "p4inv" / "samples-refined.h5").exists()
    assert any(line.startswith("refine p4inv: done; AIS with 2 levels") for line in said), said
    assert (tmp_path / "out" / "report" / "report.md").exists()
    said.clear()
    pipeline.run_pipeline("tiny", tmp_path / "out", progress=False, say=said.append)
    assert sum("skipped" in line for line in said) == 6, said


@pytest.mark.slow
def test_sample_and_analyze_commands_succeed(trained_run, tmp_path, cli):
    import re

    data, run = trained_run
    out = tmp_path / "s.h5"
    args = ("sample", run, "--n", "40", "--batch", "40", "--workers", "1", "--seed", "2", "--out", out, "--quiet")
    result = cli(*args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("40 samples:") and load_trajectory(out).n_frames == 40
    # numbers a person reads: at most 4 significant digits
    assert re.search(r"mean energy -?\d[\d.]{0,4}(e[+-]\d+)? kT", result.stdout), result.stdout
    rerun = cli(*args)
    assert rerun.returncode == 0 and rerun.stdout == result.stdout  # complete: the same summary, no work
    report = tmp_path / "report"
    result = cli("analyze", run, "--data", data, "--out", report, "--workers", "1", "--rama-bins", "100")
    assert result.returncode == 0, result.stderr
    assert f"report written to {report / 'report.md'}" in result.stdout
    metrics = json.loads((report / "metrics.json").read_text())
    assert metrics["temperature_K"] == 600.0 and metrics["models"]["p4inv"]["n_samples"] == 600
    # the table's grid: its KL and TV on 100 x 100 bins, and the report says so
    assert metrics["ramachandran_bins"] == 100 and "KL(MD || model) of 100 x 100" in (report / "report.md").read_text()


@pytest.mark.slow
def test_temperature_must_be_known_to_sample_and_analyze(trained_run, tmp_path):
    import shutil

    data, run = trained_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    complete = json.loads((copy / "complete.json").read_text())
    del complete["temperature"]
    (copy / "complete.json").write_text(json.dumps(complete))
    settings = SampleSettings(n=20, batch=20, workers=1)
    with pytest.raises(InputError, match=r"records no temperature; pass temperature \(--temperature\)"):
        sample_run(copy, settings, out=tmp_path / "a.h5", progress=False)
    summary, _ = sample_run(copy, settings, out=tmp_path / "a.h5", progress=False, temperature=600.0)
    assert summary["samples"] == 20
    ais = RefineSettings(levels=1, steps=0)  # refinement takes the temperature as sampling does
    with pytest.raises(InputError, match=r"records no temperature; pass temperature \(--temperature\)"):
        refine_run(copy, settings, ais, out=tmp_path / "a.h5", progress=False)
    refined, _ = refine_run(copy, settings, ais, out=tmp_path / "a.h5", progress=False, temperature=600.0)
    assert refined["samples"] == 20
    with pytest.raises(InputError, match=r"records 600 K, but temperature \(--temperature\) says 500 K"):
        sample_run(run, settings, out=tmp_path / "b.h5", progress=False, temperature=500.0)
    plain = tmp_path / "plain.h5"
    mdtraj.load(str(data)).save_hdf5(str(plain))  # frames only, no bgp4 settings
    with pytest.raises(InputError, match=r"records no temperature; pass temperature \(--temperature\)"):
        analyze(plain, [run], tmp_path / "report", workers=1)


def test_every_preset_holds_valid_settings():
    from bgp4 import pipeline
    from bgp4.settings import RefineSettings, SampleSettings, TrainSettings
    from bgp4.simulation.md import MDSettings

    for name, preset in pipeline.PRESETS.items():
        MDSettings(**preset["md"]).resolved()
        SampleSettings(**preset["sample"]).validated()
        for model in preset["models"]:
            assert TrainSettings(model=model, **pipeline.preset_train_settings(name, model)).validated().model == model
        for model, refine in preset.get("refine", {}).items():
            assert model in preset["models"] and RefineSettings(**refine).validated().levels > 0


@pytest.mark.slow
def test_analyze_against_other_md_of_the_same_molecule_uses_its_frames_for_forward_ess(trained_run, tmp_path):
    """Another MD file of the same molecule and system: analyze works, and the forward ESS is
    computed on that file's own frames (independent of training), with a note saying so."""
    _, run = trained_run
    other = tmp_path / "other.h5"
    simulate(other, MDSettings(frames=300, equilibration_ps=1.0, replicas=1, seed=9), progress=False)
    metrics = analyze(other, [run], tmp_path / "report", workers=1)
    (summary,) = metrics["models"].values()
    assert "not the run's training data" in summary["forward_ess_note"]
    assert summary["forward_ess_frames"] == 300 and summary["forward_ess"] is not None
    assert 0.0 <= summary["forward_ess"] <= 1.0
