"""The per-model metrics dict (bgp4.analysis.metrics): JSON-ready, flat, and gated on defined weights."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from bgp4.analysis import estimators as analysis
from bgp4.analysis.metrics import REWEIGHTED_KEYS, model_metrics, summarize_reference

KT_600 = 4.98868  # kJ/mol


@pytest.fixture(scope="module")
def md(md_frames, molecule):
    frames, energies = md_frames
    phi, psi = analysis.backbone_dihedrals(frames, molecule)
    u = energies / KT_600
    return u, phi, psi, analysis.low_energy_threshold(u)


def test_perfect_model_metrics_are_json_ready(md):
    u_md, phi, psi, threshold = md
    log_q = -u_md  # a perfect model: all weights equal
    u_model = u_md.copy()
    u_model[:10] = np.inf
    summary = model_metrics(u_model, log_q, phi, psi, u_md, phi, psi, threshold, weights_defined=True)
    json.dumps(summary)
    assert all(not isinstance(v, (dict, list)) for v in summary.values())  # flat
    assert summary["n_samples"] == 3000 and summary["n_nonfinite"] == 10
    assert summary["energy_shift_kT"] == pytest.approx(u_md[10:].mean() - u_md.mean())
    assert summary["energy_w2"] >= abs(summary["energy_shift_kT"])
    assert summary["reverse_ess"] == pytest.approx(2990 / 3000)
    assert summary["reverse_ess_ci_low"] <= summary["reverse_ess"] <= summary["reverse_ess_ci_high"]
    assert summary["n_zero_weight"] == 10 and summary["weights_defined"] and summary["weights_note"] is None
    assert summary["ramachandran_kl"] == pytest.approx(0.0, abs=1e-12)
    assert summary["ramachandran_tv"] == pytest.approx(0.0, abs=1e-12)
    assert 0 < summary["ramachandran_kl_reweighted"] < 0.05
    assert summary["p_phi_positive_error"] == 0.0 and summary["dF_phi_error_kT"] == 0.0
    assert abs(summary["dF_phi_reweighted_error_kT"]) < 0.1
    # As many samples as MD frames: no frames left for a floor, and the dict says so.
    assert summary["ramachandran_kl_floor"] is None and "floor undefined" in summary["ramachandran_floor_note"]
    assert summary["low_energy_fraction"] == pytest.approx(2989 / 3000, abs=1 / 3000)


def test_floors_sit_beside_the_distances_of_an_md_subsample(md):
    u_md, phi, psi, threshold = md
    half = slice(0, 1000)
    summary = model_metrics(
        u_md[half], -u_md[half], phi[half], psi[half], u_md, phi, psi, threshold, bins=16, weights_defined=True, seed=3
    )
    # The model is an MD subsample itself: its distances are of the size of the floor.
    assert summary["ramachandran_floor_note"] is None
    assert 0.3 < summary["ramachandran_tv"] / summary["ramachandran_tv_floor"] < 3.0
    # Equal weights: ESS = N, so the floor at ESS * N is the same subsample size.
    assert summary["ramachandran_tv_floor_ess"] == pytest.approx(summary["ramachandran_tv_floor"], rel=0.3)
    again = model_metrics(
        u_md[half], -u_md[half], phi[half], psi[half], u_md, phi, psi, threshold, bins=16, weights_defined=True, seed=3
    )
    assert again == summary  # seeded


def test_undefined_weights_give_nulls_and_a_note(md):
    u_md, phi, psi, threshold = md
    note = "the 60-dim flow models constrained bonds"
    summary = model_metrics(
        u_md + 1.0, -u_md, phi, psi, u_md, phi, psi, threshold, weights_defined=False, weights_note=note
    )
    json.dumps(summary)
    assert summary["weights_defined"] is False and summary["weights_note"] == note
    assert all(summary[key] is None for key in REWEIGHTED_KEYS)
    # Raw metrics are always there.
    assert summary["energy_shift_kT"] == pytest.approx(1.0)
    assert summary["energy_w2"] == pytest.approx(1.0)
    assert summary["ramachandran_tv"] == pytest.approx(0.0, abs=1e-12)
    no_log_q = model_metrics(u_md, None, phi, psi, u_md, phi, psi, threshold, weights_defined=True)
    assert no_log_q["weights_defined"] is False and no_log_q["weights_note"]
    assert all(no_log_q[key] is None for key in REWEIGHTED_KEYS)


def test_empty_samples_and_reference(md):
    u_md, phi, psi, threshold = md
    empty = model_metrics(
        np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), u_md, phi, psi, threshold, weights_defined=True
    )
    json.dumps(empty)
    assert empty["mean_energy_kT"] is None and empty["reverse_ess"] is None and empty["ramachandran_kl"] is None
    assert empty["energy_w2"] is None and empty["p_phi_positive"] is None

    reference = summarize_reference(u_md, threshold, u_md_kT=u_md, phi=phi)
    json.dumps(reference)
    assert reference["energy_shift_kT"] == 0.0 and reference["energy_w2"] == 0.0
    assert reference["dF_phi_kT"] == pytest.approx(analysis.state_free_energy(float(np.mean(phi > 0))))
    assert reference["median_energy_kT"] == pytest.approx(float(np.median(u_md)))
    plain = summarize_reference(u_md, threshold)
    assert plain["energy_shift_kT"] is None and "p_phi_positive" not in plain
    assert not math.isnan(reference["p_phi_positive"])
