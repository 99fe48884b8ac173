"""The per-model metrics dict (bgp4.analysis.metrics): JSON-ready, flat but for "residues", gated on weights."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from bgp4.analysis import estimators as analysis
from bgp4.analysis.metrics import (
    PAIR_KEYS,
    PAIR_REWEIGHTED_KEYS,
    REWEIGHTED_KEYS,
    TorsionPair,
    model_metrics,
    state_summary,
    summarize_reference,
)

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


def test_each_residue_gets_the_metrics_of_its_own_pair(md):
    u_md, phi, psi, threshold = md
    rng = np.random.default_rng(4)
    n = 800
    u, log_q = u_md[:n], -u_md[:n] + rng.normal(0.0, 0.3, n)
    shifted = np.angle(np.exp(1j * (psi + 1.0)))  # a second "residue": other torsions, same frames
    residues = {
        "ALA2": TorsionPair(phi[:n], psi[:n], phi, psi),
        "ALA3": TorsionPair(shifted[:n], phi[:n], shifted, phi),
    }
    summary = model_metrics(
        u, log_q, phi[:n], psi[:n], u_md, phi, psi, threshold, weights_defined=True, residues=residues
    )
    json.dumps(summary)
    flat = model_metrics(u, log_q, phi[:n], psi[:n], u_md, phi, psi, threshold, weights_defined=True)
    assert {k: v for k, v in summary.items() if k != "residues"} == flat  # the flat keys are as before
    own, other = summary["residues"]["ALA2"], summary["residues"]["ALA3"]
    assert set(own) == set(PAIR_KEYS) | set(PAIR_REWEIGHTED_KEYS)
    assert own == {k: flat[k] for k in own}  # alanine dipeptide: the one residue is the flat pair
    assert other["p_phi_positive"] == pytest.approx(float(np.mean(shifted[:n] > 0)))
    assert other["p_phi_positive_error"] == pytest.approx(other["p_phi_positive"] - float(np.mean(shifted > 0)))
    assert other["ramachandran_tv_floor"] > 0 and 0 < other["ramachandran_tv_reweighted"] <= 1
    # without weights, every residue's reweighted keys are None as the flat ones
    unweighted = model_metrics(
        u, None, phi[:n], psi[:n], u_md, phi, psi, threshold, weights_defined=True, residues=residues
    )
    assert all(unweighted["residues"]["ALA3"][k] is None for k in PAIR_REWEIGHTED_KEYS)
    assert unweighted["residues"]["ALA3"]["ramachandran_tv"] == other["ramachandran_tv"]


def test_no_backbone_gives_energies_and_weights_only(md):
    u_md, _, _, threshold = md
    summary = model_metrics(u_md[:500], -u_md[:500], None, None, u_md, None, None, threshold, weights_defined=True)
    json.dumps(summary)
    assert all(summary[k] is None for k in (*PAIR_KEYS, *PAIR_REWEIGHTED_KEYS))
    assert summary["reverse_ess"] == pytest.approx(1.0)
    # MD frames against MD: the energy distributions differ by sampling alone
    assert 0 <= summary["energy_w2"] < 0.5 * np.std(u_md)
    assert "residues" not in summary


def test_md_states_carry_a_block_error(md):
    _, phi, _, _ = md
    state = state_summary(phi, groups=np.repeat([0, 1], phi.size // 2))
    assert state["p_phi_positive"] == pytest.approx(float(np.mean(phi > 0)))
    assert 0 < state["p_phi_positive_se"] < 0.5
    p = state["p_phi_positive"]
    assert state["dF_phi_se_kT"] == pytest.approx(state["p_phi_positive_se"] / (p * (1 - p)))
    reference = summarize_reference(md[0], md[3], phi=phi)
    assert reference["p_phi_positive_se"] > 0
    assert reference["dF_phi_se_kT"] == pytest.approx(reference["p_phi_positive_se"] / (p * (1 - p)))
