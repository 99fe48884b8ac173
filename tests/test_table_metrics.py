"""The field's table metrics: the clipped reverse ESS, the forward ESS, the cost counts and the grid."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from bgp4.analysis.grid import MAX_RAMA_BINS, TABLE_RAMA_BINS, check_rama_bins
from bgp4.analysis.weights import clip_log_weights, clipped_reverse_ess, forward_ess, reverse_ess
from bgp4.errors import InputError
from bgp4.report.costs import cost_metrics, forward_frames, forward_metrics
from bgp4.report.render import metrics_section
from bgp4.simulation.data import md_energy_evaluations, md_steps_per_frame
from bgp4.simulation.merge import merged_settings


def test_clipping_lowers_only_the_largest_log_weights():
    rng = np.random.default_rng(0)
    log_w = rng.normal(0.0, 1.0, 100_000)
    log_w[:3] = [40.0, 35.0, -np.inf]  # two runaway weights and a zero weight
    clipped = clip_log_weights(log_w)
    tenth_largest = np.sort(log_w)[-10]  # k = 1e-4 of 1e5 = 10: the 9 above the 10th are lowered to it
    assert clipped.max() == tenth_largest and np.count_nonzero(clipped < log_w) == 9
    assert np.isneginf(clipped[2]) and np.array_equal(clipped[log_w <= tenth_largest], log_w[log_w <= tenth_largest])
    # the runaway weights own the plain ESS; clipped, the ESS of the normal bulk comes back
    assert reverse_ess(log_w) < 1e-3
    assert clipped_reverse_ess(log_w) == pytest.approx(math.exp(-1.0), rel=0.05)  # lognormal, sigma = 1
    # equal weights: nothing to clip; a fraction of 0 is the plain ESS
    assert clipped_reverse_ess(np.zeros(50)) == 1.0
    assert clipped_reverse_ess(log_w, fraction=0.0) == reverse_ess(log_w)
    with pytest.raises(InputError, match="fraction"):
        clip_log_weights(log_w, fraction=1.0)


def test_clipping_follows_the_tables_top_k_rule_at_small_counts():
    # 20,000 samples: k = 2, so only the largest weight is lowered, to the second largest
    log_w = np.r_[np.zeros(19_997), 5.0, 9.0, 7.0]
    assert np.array_equal(clip_log_weights(log_w)[-3:], [5.0, 7.0, 7.0])
    # under 20,000 samples k < 2: nothing is clipped (zero weights count in n)
    assert np.array_equal(clip_log_weights(log_w[1:]), log_w[1:])
    assert clipped_reverse_ess(log_w[1:]) == reverse_ess(log_w[1:])
    # fewer positive weights than k: nothing to clip against
    sparse = np.full(30_000, -np.inf)
    sparse[:2] = [1.0, 4.0]
    assert np.array_equal(clip_log_weights(sparse), sparse)


def test_forward_ess_known_answers():
    # two frames with w = 1 and 3: N^2 / (sum w * sum 1/w) = 4 / (4 * 4/3)
    assert forward_ess(np.log([1.0, 3.0])) == pytest.approx(0.75)
    assert forward_ess(np.full(7, -123.0)) == pytest.approx(1.0)  # q = p up to a constant
    rng = np.random.default_rng(1)
    log_w = rng.normal(0.0, 0.7, 200_000)
    # lognormal weights under p: mean(w) mean(1/w) = exp(sigma^2), at any scale
    assert forward_ess(log_w) == pytest.approx(math.exp(-0.49), rel=0.02)
    assert forward_ess(log_w + 5_000.0) == pytest.approx(forward_ess(log_w), rel=1e-12)
    # a frame where q vanishes (or its log q is undefined) means q misses a part of p
    assert forward_ess(np.array([0.0, 0.1, np.inf])) == 0.0
    assert forward_ess(np.array([0.0, np.nan])) == 0.0
    assert math.isnan(forward_ess(np.zeros(0)))


def test_costs_count_training_sampling_and_md_apart():
    complete = {"energy_evaluations": 500, "energy_evaluations_total": 1500, "md_frames": 900, "md_frames_total": 900}
    data = {"save_every": 10, "timestep_fs": 2.0, "equilibration_ps": 1.0, "replicas": 2}
    costs = cost_metrics(complete, {"steps": 100}, data, 900, 1000, 25.0, n_data_frames=2000)
    assert costs == {
        "train_energy_evaluations": 1500,
        "sample_energy_evaluations": 25_000,
        "energy_evaluations_total": 26_500,
        "md_energy_evaluations": 2000 * 10 + 2 * 500,  # the whole file, with 2 replicas' equilibration
        "train_md_frames": 900,
        "train_md_frames_energy_evaluations": 9000,
    }
    # a run that predates the counts: likelihood training used every training frame
    old = cost_metrics({"energy_evaluations": 64}, {"steps": 100}, {}, 1800, 10, 1)
    assert old["train_energy_evaluations"] == 64 and old["train_md_frames"] == 1800
    assert old["md_energy_evaluations"] is None and old["train_md_frames_energy_evaluations"] is None  # no save_every
    unknown = cost_metrics({}, {}, {"save_every": 10}, 1800, 10, 1)
    assert unknown["train_energy_evaluations"] is None and unknown["energy_evaluations_total"] is None
    assert unknown["train_md_frames"] is None
    # replica exchange: every walker steps between two frames of the lowest temperature
    assert md_steps_per_frame({"save_every": 50, "temperatures": [300.0, 400.0, 500.0, 600.0]}) == 200


def test_md_energy_evaluations_count_the_whole_simulation():
    # plain MD: frames x save_every, and each replica's equilibration (100 ps of 2 fs steps)
    plain = {"save_every": 10, "timestep_fs": 2.0, "equilibration_ps": 100.0, "replicas": 4}
    assert md_energy_evaluations(plain, 1000) == 1000 * 10 + 4 * 50_000
    # replica exchange: every walker steps between frames and equilibrates, in whole iterations
    remd = {"save_every": 30, "timestep_fs": 1.0, "equilibration_ps": 0.2, "replicas": 0, "temperatures": [1, 2, 3]}
    assert md_energy_evaluations(remd, 50) == 50 * 30 * 3 + 3 * 7 * 30  # 200 steps: 7 iterations of 30
    assert md_energy_evaluations({"save_every": 10}, 1000) is None  # no time step: equilibration unknown
    assert md_energy_evaluations({**plain, "equilibration_ps": 0.0}, 1000) == 10_000
    merged = {"merged_from": [{"md_energy_evaluations": 400}, {"md_energy_evaluations": 600}]}  # bgp4 merge
    assert md_energy_evaluations(merged, 2000) == 1000  # the sources' MD, not a cost per frame
    assert md_energy_evaluations({"merged_from": [{"md_energy_evaluations": 400}, {}]}, 2000) is None


def test_a_merged_file_counts_the_md_of_its_sources():
    """`bgp4 merge` records each input's MD; the merged file's count is their sum."""
    plain = {"temperature": 300.0, "save_every": 10, "timestep_fs": 2.0, "equilibration_ps": 100.0, "replicas": 4}
    remd = {"temperature": 300.0, "save_every": 30, "timestep_fs": 1.0, "equilibration_ps": 0.2, "temperatures": [1, 2]}
    merged = merged_settings([plain, remd], [Path("a.h5"), Path("b.h5")], [1000, 50])
    assert "save_every" not in merged and merged["frames"] == 1050
    assert md_energy_evaluations(merged, 1050) == md_energy_evaluations(plain, 1000) + md_energy_evaluations(remd, 50)


def test_forward_frames_are_the_held_out_ones_of_the_runs_own_data_else_any(tmp_path):
    test = np.arange(0, 300, 3)
    np.savez(tmp_path / "split.npz", train=np.setdiff1d(np.arange(300), test), test=test)
    own, note = forward_frames(tmp_path, 300, same_data=True, seed=1, n=40)
    assert note is None and own.size == 40 and np.isin(own, test).all() and np.all(np.diff(own) > 0)
    assert np.array_equal(forward_frames(tmp_path, 300, True, seed=1, n=40)[0], own)  # seeded
    other, note = forward_frames(tmp_path, 5000, same_data=False, seed=1, n=40)
    assert other.size == 40 and other.max() < 5000 and not np.isin(other, test).all()
    assert "not the run's training data" in note and "40 of its 5000" in note
    # a split beyond the file's frames cannot be this file's: any frames, never an index error
    beyond, note = forward_frames(tmp_path, 200, same_data=True, n=1000)
    assert np.array_equal(beyond, np.arange(200)) and "frame 297, beyond the data file's 200" in note


def test_forward_metrics_of_a_real_generator_on_either_data(tmp_path, md_frames, molecule):
    from bgp4.generator.model import build_generator

    xyz, energies = md_frames[0][::10].copy(), md_frames[1][::10]  # 300 frames
    build_generator("rnvp", data=xyz, blocks=1, hidden=8).save(tmp_path / "model.pt")
    test = np.arange(1, 300, 4)
    np.savez(tmp_path / "split.npz", train=np.setdiff1d(np.arange(300), test), test=test)
    u = energies / molecule.kT(600.0)
    own = forward_metrics(tmp_path, xyz, u, True, seed=0, same_data=True)
    assert own["forward_ess_frames"] == test.size and own["forward_ess_note"] is None
    assert own["forward_ess_nonfinite_log_q"] == 0 and 0.0 < own["forward_ess"] <= 1.0
    other = forward_metrics(tmp_path, xyz, u, True, seed=0, same_data=False)
    assert other["forward_ess_frames"] == 300 and "independent of training" in other["forward_ess_note"]
    xyz[test[5]] = 0.0  # every atom at one point: log q is not finite there (+inf), which makes the ESS 0
    broken = forward_metrics(tmp_path, xyz, u, True, seed=0, same_data=True)
    assert broken["forward_ess_nonfinite_log_q"] == 1 and broken["forward_ess"] == 0.0
    (tmp_path / "split.npz").unlink()  # other data needs no split; the run's own data does
    assert forward_metrics(tmp_path, xyz, u, True, same_data=False)["forward_ess_frames"] == 300
    assert forward_metrics(tmp_path, xyz, u, True, same_data=True)["forward_ess"] is None


def test_the_tables_ramachandran_grid_is_an_analyze_option(tmp_path, cli):
    assert check_rama_bins(TABLE_RAMA_BINS) == 100 and check_rama_bins(2.0) == 2
    for bad in (1, 2.5, MAX_RAMA_BINS + 1):
        with pytest.raises(InputError, match="2 to 1000 bins"):
            check_rama_bins(bad)
    assert "KL(MD || model) of 100 x 100" in metrics_section(100) and "{grid}" not in metrics_section()
    # bad input: one line, exit 2, no report directory
    result = cli("analyze", tmp_path / "run", "--out", tmp_path / "report", "--rama-bins", "1")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "bins per axis" in result.stderr
    assert not (tmp_path / "report").exists()
    result = cli("analyze", "--sweep", tmp_path / "sweep", "--rama-bins", "5000")
    assert result.returncode == 2 and "bins per axis" in result.stderr and not (tmp_path / "sweep").exists()
    # options a sweep's report takes from the sweep are refused, not ignored; --refresh needs --sweep
    result = cli("analyze", "--sweep", tmp_path / "sweep", "--data", tmp_path / "d.h5", "--seed", "3")
    assert result.returncode == 2 and "--data, --seed cannot go with --sweep" in result.stderr
    result = cli("analyze", "--sweep", tmp_path / "sweep", "--out", tmp_path / "r", "--temperature", "300")
    assert result.returncode == 2 and "--out, --temperature cannot go with --sweep" in result.stderr
    result = cli("analyze", tmp_path / "run", "--refresh", "--out", tmp_path / "report")
    assert result.returncode == 2 and "--refresh goes with --sweep DIR only" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seed", "-1"], "seed (--seed) must be >= 0, got -1"),
        (["--workers", "-5"], "workers (--workers) must be >= 0, got -5"),
        (["--out", "FILE"], "(--out) is a file"),
    ],
)
def test_bad_analyze_settings_are_refused_before_any_file_is_read_or_written(tmp_path, cli, args, message):
    taken = tmp_path / "taken"
    taken.write_text("not a report directory")
    args = [str(taken) if a == "FILE" else a for a in args]
    result = cli("analyze", tmp_path / "run", "--data", tmp_path / "missing.h5", "--out", tmp_path / "report", *args)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"] and taken.read_text() == "not a report directory"
    if "--out" not in args:  # the same with --sweep, which may have no run to analyze
        result = cli("analyze", "--sweep", tmp_path / "sweep", *args)
        assert result.returncode == 2 and message in result.stderr and not (tmp_path / "sweep").exists()
