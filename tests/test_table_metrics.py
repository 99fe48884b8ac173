"""The field's table metrics: the clipped reverse ESS, the forward ESS and the cost counts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bgp4.analysis.weights import clip_log_weights, clipped_reverse_ess, forward_ess, reverse_ess
from bgp4.errors import InputError
from bgp4.report.costs import cost_metrics, md_steps_per_frame


def test_clipping_lowers_only_the_largest_log_weights():
    rng = np.random.default_rng(0)
    log_w = rng.normal(0.0, 1.0, 100_000)
    log_w[:3] = [40.0, 35.0, -np.inf]  # two runaway weights and a zero weight
    clipped = clip_log_weights(log_w)
    cut = np.quantile(log_w[np.isfinite(log_w)], 1 - 1e-4)
    assert clipped.max() == pytest.approx(cut) and np.count_nonzero(clipped < log_w) == 10  # 1e-4 of 1e5
    assert np.isneginf(clipped[2]) and np.array_equal(clipped[3:][log_w[3:] < cut], log_w[3:][log_w[3:] < cut])
    # the runaway weights own the plain ESS; clipped, the ESS of the normal bulk comes back
    assert reverse_ess(log_w) < 1e-3
    assert clipped_reverse_ess(log_w) == pytest.approx(math.exp(-1.0), rel=0.05)  # lognormal, sigma = 1
    # equal weights: nothing to clip; a fraction of 0 is the plain ESS
    assert clipped_reverse_ess(np.zeros(50)) == 1.0
    assert clipped_reverse_ess(log_w, fraction=0.0) == reverse_ess(log_w)
    with pytest.raises(InputError, match="fraction"):
        clip_log_weights(log_w, fraction=1.0)


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
    costs = cost_metrics(complete, {"steps": 100}, {"save_every": 10}, 900, 1000, 25.0)
    assert costs == {
        "train_energy_evaluations": 1500,
        "sample_energy_evaluations": 25_000,
        "energy_evaluations_total": 26_500,
        "train_md_frames": 900,
        "md_energy_evaluations": 9000,
    }
    # a run that predates the counts: likelihood training used every training frame
    old = cost_metrics({"energy_evaluations": 64}, {"steps": 100}, {}, 1800, 10, 1)
    assert old["train_energy_evaluations"] == 64 and old["train_md_frames"] == 1800
    assert old["md_energy_evaluations"] is None  # the data records no save interval
    unknown = cost_metrics({}, {}, {"save_every": 10}, 1800, 10, 1)
    assert unknown["train_energy_evaluations"] is None and unknown["energy_evaluations_total"] is None
    assert unknown["train_md_frames"] is None
    # replica exchange: every walker steps between two frames of the lowest temperature
    assert md_steps_per_frame({"save_every": 50, "temperatures": [300.0, 400.0, 500.0, 600.0]}) == 200
