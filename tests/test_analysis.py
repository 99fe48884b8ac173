"""Known-answer tests for the sample-quality metrics (bgp4.analysis.estimators)."""

from __future__ import annotations

import dataclasses
import math

import mdtraj
import numpy as np
import pytest

from bgp4.analysis import estimators as analysis
from bgp4.errors import InputError
from bgp4.simulation.molecule import PHI, PSI


@pytest.fixture(scope="module")
def md_angles(md_frames, molecule):
    frames, _ = md_frames
    return analysis.backbone_dihedrals(frames, molecule)


def test_backbone_dihedrals_match_mdtraj(md_frames, molecule):
    frames, _ = md_frames
    phi, psi = analysis.backbone_dihedrals(frames[:200], molecule)
    direct = mdtraj.compute_dihedrals(mdtraj.Trajectory(frames[:200], molecule.topology), [PHI, PSI])
    np.testing.assert_allclose(phi, direct[:, 0], atol=1e-6)
    np.testing.assert_allclose(psi, direct[:, 1], atol=1e-6)
    assert phi.dtype == np.float64 and phi.shape == (200,)
    assert np.all(np.abs(phi) <= np.pi) and np.all(np.abs(psi) <= np.pi)
    # A single frame works as well as a batch.
    phi_one, _ = analysis.backbone_dihedrals(frames[0], molecule)
    assert phi_one[0] == pytest.approx(phi[0])


def test_backbone_dihedrals_reject_bad_shape(molecule):
    with pytest.raises(InputError, match="xyz must have shape"):
        analysis.backbone_dihedrals(np.zeros((3, 21, 3)), molecule)
    with pytest.raises(InputError, match="expected a bgp4 Molecule"):
        analysis.backbone_dihedrals(np.zeros((3, 22, 3)), molecule.topology)
    no_backbone = dataclasses.replace(molecule, phi=(), psi=())  # how the molecule layer says it
    with pytest.raises(InputError, match="expected a bgp4 Molecule with backbone torsions"):
        analysis.backbone_dihedrals(np.zeros((3, 22, 3)), no_backbone)


def test_energy_shift_and_low_energy_fraction():
    u = np.array([1.0, 2.0, 3.0, 4.0])
    assert analysis.energy_shift(u, u) == 0.0
    # Non-finite model energies are ignored in the mean.
    assert analysis.energy_shift(np.array([3.5, np.inf, np.nan]), u) == pytest.approx(1.0)
    assert math.isnan(analysis.energy_shift(np.array([np.nan]), u))
    assert analysis.low_energy_fraction(np.array([0.0, 1.0, 2.0, 5.0, np.inf, np.nan, -np.inf, 1.9]), 2.0) == 3 / 8
    assert analysis.low_energy_threshold(np.array([1.0, 7.0, np.nan])) == 7.0
    # The training set itself: everything but its maximum is strictly below the threshold.
    assert analysis.low_energy_fraction(u, analysis.low_energy_threshold(u)) == 0.75


def test_noisy_reference_statistics():
    xyz = np.zeros((2000, 22, 3))
    noisy = analysis.noisy_reference(xyz, rng=np.random.default_rng(0))
    assert noisy.shape == xyz.shape
    assert np.std(noisy) == pytest.approx(0.004, rel=0.02)
    assert abs(np.mean(noisy)) < 1e-4
    np.testing.assert_array_equal(analysis.noisy_reference(xyz[:3], rng=5), analysis.noisy_reference(xyz[:3], rng=5))
    with pytest.raises(InputError):
        analysis.noisy_reference(xyz, sigma=-1.0)


def test_reverse_ess_known_answers():
    assert analysis.reverse_ess(np.zeros(100)) == pytest.approx(1.0)
    # Equal weights at a huge log scale must not overflow.
    assert analysis.reverse_ess(np.full(10, 5000.0)) == pytest.approx(1.0)
    dominant = np.full(1000, -1e4)
    dominant[3] = 1e4
    assert analysis.reverse_ess(dominant) == pytest.approx(1e-3)
    # Half the samples with weight zero: ESS/N = 1/2.
    half = np.concatenate([np.zeros(50), np.full(50, -np.inf)])
    assert analysis.reverse_ess(half) == pytest.approx(0.5)
    assert analysis.reverse_ess(np.full(5, -np.inf)) == 0.0
    assert analysis.reverse_ess(np.full(5, np.nan)) == 0.0
    assert math.isnan(analysis.reverse_ess(np.zeros(0)))
    # Two weights 1 and e: (1 + e)^2 / (1 + e^2) / 2.
    expected = (1 + math.e) ** 2 / (1 + math.e**2) / 2
    assert analysis.reverse_ess(np.array([0.0, 1.0])) == pytest.approx(expected)


def test_plus_infinite_log_weights_take_all_the_weight():
    # +inf: a weight without bound; those samples share the weight, the estimate says it is dominated
    log_w = np.array([np.inf, 0.0, -1.0, np.inf, np.nan])
    assert analysis.reverse_ess(log_w) == pytest.approx(2 / 5)
    np.testing.assert_array_equal(analysis.normalized_weights(log_w), [0.5, 0.0, 0.0, 0.5, 0.0])
    assert analysis.reverse_ess(np.array([np.inf, 0.0, 0.0, 0.0])) == pytest.approx(1 / 4)


def test_log_weights_with_infinite_energy():
    u = np.array([1.0, np.inf, 2.0, np.nan])
    log_q = np.array([-1.0, 0.0, np.nan, 0.5])
    log_w = analysis.log_weights(u, log_q)
    assert log_w[0] == 0.0
    assert np.all(np.isneginf(log_w[1:]))
    assert analysis.reverse_ess(log_w) == pytest.approx(0.25)
    w = analysis.normalized_weights(log_w)
    np.testing.assert_array_equal(w, [1.0, 0.0, 0.0, 0.0])
    with pytest.raises(InputError, match="same length"):
        analysis.log_weights(np.zeros(3), np.zeros(4))


def test_normalized_weights_are_stable():
    w = analysis.normalized_weights(np.array([-3000.0, -3000.0 + math.log(3.0), np.nan, -np.inf]))
    np.testing.assert_allclose(w, [0.25, 0.75, 0.0, 0.0])
    np.testing.assert_array_equal(analysis.normalized_weights(np.full(3, -np.inf)), np.zeros(3))


def test_ramachandran_histogram_is_a_density():
    rng = np.random.default_rng(1)
    phi, psi = rng.uniform(-np.pi, np.pi, (2, 5000))
    density = analysis.ramachandran_histogram(phi, psi, bins=16)
    assert density.shape == (16, 16)
    area = (2 * np.pi / 16) ** 2
    assert density.sum() * area == pytest.approx(1.0)
    # Samples exactly on the upper edge fall in the last bin rather than being dropped.
    edge = analysis.ramachandran_histogram(np.array([np.pi]), np.array([-np.pi]), bins=4)
    assert edge[3, 0] > 0
    assert not analysis.ramachandran_histogram(np.array([np.nan]), np.array([0.0])).any()
    with pytest.raises(InputError, match=">= 0"):
        analysis.ramachandran_histogram(phi, psi, weights=np.full(5000, -1.0))


def test_ramachandran_kl(md_angles):
    phi, psi = md_angles
    assert analysis.ramachandran_kl(phi, psi, phi, psi) == pytest.approx(0.0, abs=1e-12)
    rng = np.random.default_rng(2)
    uniform = rng.uniform(-np.pi, np.pi, (2, 3000))
    kl_uniform = analysis.ramachandran_kl(phi, psi, *uniform)
    assert kl_uniform > 0.5
    # A model that covers only part of the MD support is penalised much harder (eps floor).
    half = phi < np.median(phi)
    assert analysis.ramachandran_kl(phi, psi, phi[half], psi[half]) > 1.0
    # Weights that switch off the missing half reproduce the same value.
    weights = half.astype(float)
    assert analysis.ramachandran_kl(phi, psi, phi, psi, weights=weights) == pytest.approx(
        analysis.ramachandran_kl(phi, psi, phi[half], psi[half])
    )
    assert math.isnan(analysis.ramachandran_kl(phi, psi, np.zeros(0), np.zeros(0)))


def test_ramachandran_kl_of_disjoint_point_masses():
    # p and q put all mass in different single bins; with density floor eps the sum reduces to
    # area * (B - eps) * ln(B / eps) = ln(B / eps), B = 1/area + eps.
    bins, eps = 8, 1e-10
    area = (2 * np.pi / bins) ** 2
    zero = np.array([0.1])
    kl = analysis.ramachandran_kl(np.array([0.1]), zero, np.array([2.0]), zero, bins=bins, eps=eps)
    assert kl == pytest.approx(math.log((1 / area + eps) / eps), rel=1e-9)


def test_free_energy_of_uniform_is_flat():
    rng = np.random.default_rng(3)
    angle = rng.uniform(-np.pi, np.pi, 200_000)
    centers, free = analysis.free_energy_1d(angle, bins=32)
    assert centers.shape == free.shape == (32,)
    assert centers[0] == pytest.approx(-np.pi + np.pi / 32)
    assert np.nanmin(free) == 0.0
    assert np.nanmax(free) < 0.1


def test_free_energy_known_ratio_and_gaps():
    # Three times as many samples in the first bin: F difference ln 3; empty bins are nan.
    angle = np.array([-3.0, -3.0, -3.0, 3.0, np.nan])
    centers, free = analysis.free_energy_1d(angle, bins=4)
    assert free[0] == 0.0
    assert free[3] == pytest.approx(math.log(3.0))
    assert np.isnan(free[1]) and np.isnan(free[2])
    # Weights act like counts.
    _, weighted = analysis.free_energy_1d(np.array([-3.0, 3.0]), bins=4, weights=np.array([3.0, 1.0]))
    np.testing.assert_allclose(weighted, free, equal_nan=True)
    _, empty = analysis.free_energy_1d(np.zeros(0), bins=4)
    assert np.all(np.isnan(empty))


def test_noise_raises_the_energy(md_frames, molecule):
    """The paper's reference column: 0.004 nm noise lifts the mean energy by many kT."""
    import openmm

    frames, energies = md_frames
    noisy = analysis.noisy_reference(frames[:50], rng=0)
    context = openmm.Context(
        molecule.system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference")
    )
    noisy_energies = []
    for frame in noisy:
        context.setPositions(frame)
        state = context.getState(getEnergy=True)
        noisy_energies.append(state.getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole))
    shift = analysis.energy_shift(np.array(noisy_energies) / 4.98868, energies[:50] / 4.98868)
    assert shift > 5.0


def test_ramachandran_tv_identical_disjoint_and_half():
    rng = np.random.default_rng(4)
    phi = rng.uniform(-np.pi, -0.1, 2000)  # MD never visits phi > 0 here
    psi = rng.uniform(-np.pi, np.pi, 2000)
    assert analysis.ramachandran_tv(phi, psi, phi, psi) == pytest.approx(0.0, abs=1e-12)
    # All model mass where MD has none: TV = 1 (KL would only be large, TV is bounded).
    assert analysis.ramachandran_tv(phi, psi, phi + np.pi, psi) == pytest.approx(1.0)
    # Half on MD's own histogram, half where MD has none: TV = 1/2; weights that switch the
    # second half off bring it back to 0.
    model_phi, model_psi = np.concatenate([phi, phi + np.pi]), np.concatenate([psi, psi])
    assert analysis.ramachandran_tv(phi, psi, model_phi, model_psi) == pytest.approx(0.5)
    weights = np.concatenate([np.ones(2000), np.zeros(2000)])
    assert analysis.ramachandran_tv(phi, psi, model_phi, model_psi, weights=weights) == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(analysis.ramachandran_tv(phi, psi, np.zeros(0), np.zeros(0)))


def test_ramachandran_floor_matches_multinomial_theory():
    """A uniform 'MD' set on K = 16 x 16 bins: a subsample of n against the other m frames has
    E[TV] ~ (K/2) sqrt(2/pi) sqrt((1/K)(1/n + 1/m)) and E[KL] ~ (K - 1)/2 (1/n + 1/m)
    (chi-square limit; n large enough that no bin of the subsample is empty)."""
    rng = np.random.default_rng(5)
    phi, psi = rng.uniform(-np.pi, np.pi, (2, 20_000))
    k, n, m = 256, 5000, 15_000
    kl, tv = analysis.ramachandran_floor(phi, psi, n, bins=16, rng=0)
    assert tv == pytest.approx(k / 2 * math.sqrt(2 / math.pi) * math.sqrt((1 / k) * (1 / n + 1 / m)), rel=0.1)
    assert kl == pytest.approx((k - 1) / 2 * (1 / n + 1 / m), rel=0.15)
    # The floor falls with the sample size, is seeded, and undefined without frames to compare with.
    assert analysis.ramachandran_floor(phi, psi, 500, bins=16, rng=0)[1] > 2 * tv
    assert analysis.ramachandran_floor(phi, psi, n, bins=16, rng=0) == (kl, tv)
    for size in (0, 20_000, 30_000):
        assert all(math.isnan(v) for v in analysis.ramachandran_floor(phi, psi, size, bins=16))


def test_weighted_quantile_equals_unweighted_and_repeats():
    rng = np.random.default_rng(6)
    values = rng.normal(size=1001)
    probs = np.concatenate([[0.0, 0.5, 1.0], rng.uniform(size=50)])
    expected = np.quantile(values, probs, method="inverted_cdf")
    np.testing.assert_array_equal(analysis.weighted_quantile(values, probs), expected)
    np.testing.assert_array_equal(analysis.weighted_quantile(values, probs, weights=np.full(1001, 0.37)), expected)
    # Integer weights act like repeated values; non-finite values and zero weights drop out.
    counts = rng.integers(0, 4, size=values.size)
    np.testing.assert_array_equal(
        analysis.weighted_quantile(np.append(values, np.nan), probs, weights=np.append(counts, 5.0)),
        np.quantile(np.repeat(values, counts), probs, method="inverted_cdf"),
    )
    assert np.isnan(analysis.weighted_quantile(np.zeros(0), [0.5])).all()
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        analysis.weighted_quantile(values, [1.5])


def test_energy_w2_known_answers():
    rng = np.random.default_rng(7)
    u = rng.gamma(3.0, 2.0, 5000)
    # A pure shift: W2 equals the shift, in either direction.
    assert analysis.energy_w2(u, u + 1.7) == pytest.approx(1.7, rel=1e-12)
    assert analysis.energy_w2(u + 1.7, u) == pytest.approx(1.7, rel=1e-12)
    # Equal sizes: W2^2 is the mean squared difference of the sorted samples.
    v = rng.normal(6.0, 3.0, 5000)
    assert analysis.energy_w2(u, v) == pytest.approx(math.sqrt(np.mean((np.sort(u) - np.sort(v)) ** 2)))
    # Point masses: {0} vs {0, 1} gives sqrt(1/2); weights 3:1 on {0, 1} give sqrt(1/4).
    assert analysis.energy_w2(np.zeros(1), np.array([0.0, 1.0])) == pytest.approx(math.sqrt(0.5))
    assert analysis.energy_w2(np.zeros(1), np.array([0.0, 1.0]), weights=np.array([3.0, 1.0])) == pytest.approx(0.5)
    # Non-finite energies are left out; nothing finite is nan.
    assert analysis.energy_w2(u, np.append(u + 1.7, [np.inf, np.nan])) == pytest.approx(1.7, rel=1e-12)
    assert math.isnan(analysis.energy_w2(u, np.array([np.inf])))


def test_energy_w2_is_never_below_the_shift():
    rng = np.random.default_rng(8)
    for _ in range(20):
        md = rng.normal(rng.normal(), rng.uniform(0.5, 3.0), rng.integers(1, 2000))
        model = rng.standard_t(3.0, rng.integers(1, 2000)) + rng.normal()
        weights = rng.exponential(size=model.size)
        for w in (None, weights):
            shift = analysis.energy_shift(model, md, weights=w)
            assert analysis.energy_w2(md, model, weights=w) >= abs(shift) * (1 - 1e-12)


def test_weighted_energy_shift():
    u_md = np.array([0.0, 2.0])
    model = np.array([1.0, 5.0, np.inf])
    assert analysis.energy_shift(model, u_md) == pytest.approx(2.0)
    assert analysis.energy_shift(model, u_md, weights=np.array([3.0, 1.0, 1.0])) == pytest.approx(1.0)


def test_reverse_ess_interval():
    rng = np.random.default_rng(9)
    widths = []
    for n in (1000, 20_000):
        log_w = rng.normal(0.0, 0.5, n)  # lognormal weights: population ESS exp(-sigma^2)
        point = analysis.reverse_ess(log_w)
        low, high = analysis.reverse_ess_interval(log_w, rng=1)
        assert low < point < high
        widths.append(high - low)
        assert analysis.reverse_ess_interval(log_w, rng=1) == (low, high)  # seeded
    # The interval narrows with N (~1/sqrt(N)) and holds the population value exp(-sigma^2).
    assert widths[1] < widths[0] / 3
    assert low < math.exp(-0.25) < high
    assert analysis.reverse_ess_interval(np.full(50, 7.0)) == pytest.approx((1.0, 1.0))
    # Weights spanning 2,000 nats: resamples without the top weight must not underflow to nan.
    spread = np.linspace(-2000.0, 0.0, 300)
    assert all(0 < v <= 1 for v in analysis.reverse_ess_interval(spread, n_boot=50))
    assert analysis.reverse_ess_interval(np.full(5, -np.inf)) == (0.0, 0.0)
    assert all(math.isnan(v) for v in analysis.reverse_ess_interval(np.zeros(0)))
    with pytest.raises(InputError):
        analysis.reverse_ess_interval(np.zeros(5), n_boot=0)


def test_phi_positive_population_and_state_free_energy():
    phi = np.concatenate([np.full(30, 1.0), np.full(70, -1.5), [np.nan]])
    p = analysis.phi_positive_population(phi)
    assert p == pytest.approx(0.3)
    assert analysis.state_free_energy(p) == pytest.approx(math.log(7 / 3))
    # Weights that balance the two states: dF = 0.
    weights = np.concatenate([np.full(30, 7.0), np.full(70, 3.0), [1.0]])
    balanced = analysis.phi_positive_population(phi, weights)
    assert balanced == pytest.approx(0.5) and analysis.state_free_energy(balanced) == pytest.approx(0.0, abs=1e-12)
    assert analysis.state_free_energy(0.0) == math.inf and analysis.state_free_energy(1.0) == -math.inf
    assert math.isnan(analysis.phi_positive_population(np.array([np.nan])))


def test_ramachandran_tv_script_scores_files_against_a_reference(md_frames, molecule, tmp_path, capsys):
    """run/scripts/ramachandran_tv.py: a file against itself scores 0, against another file the TV
    of `ramachandran_tv` on their angles, reweighted by a samples file's log weights, and the floor
    of `ramachandran_floor`."""
    from _scripts import load_script

    from bgp4.simulation.data import load_trajectory, write_trajectory

    script = load_script("run/scripts/ramachandran_tv.py")
    frames, _ = md_frames
    first, second = tmp_path / "a.h5", tmp_path / "b.h5"
    write_trajectory(first, molecule.topology, iter([{"coordinates": frames[:2000]}]), {"temperature": 600.0})
    log_w = np.random.default_rng(0).normal(size=1000)
    extras = {"log_w": log_w, "in_domain": np.ones(1000, dtype=bool)}
    write_trajectory(second, molecule.topology, iter([{"coordinates": frames[2000:]}]), {"temperature": 600.0}, extras)
    script.main([str(first), str(first), str(second), "--floor", "500", "--weighted"])
    out = capsys.readouterr().out
    angles = (analysis.backbone_dihedrals(load_trajectory(f).xyz, molecule) for f in (first, second))
    (phi, psi), (phi_b, psi_b) = angles
    w = np.exp(log_w - log_w.max())
    tv = analysis.ramachandran_tv(phi, psi, phi_b, psi_b)
    tv_w = analysis.ramachandran_tv(phi, psi, phi_b, psi_b, weights=w / w.sum())
    assert "a.h5 (2000): TV 0.0000;" in out
    assert f"b.h5 (1000): TV {tv:.4f}, reweighted {tv_w:.4f};" in out and tv > 0 and tv_w != tv
    assert f"floor at 500: TV {analysis.ramachandran_floor(phi, psi, 500)[1]:.4f}" in out
    # subsamples of all of a file's frames are the file itself; of more frames than it has, none
    script.main([str(first), str(second), "--subsample", "1000", "--repeats", "2"])
    assert f"2 random subsamples of 1000: TV {tv:.4f}, {tv:.4f}; mean {tv:.4f}" in capsys.readouterr().out
    script.main([str(first), str(second), "--subsample", "1500"])
    assert "no subsamples: 1000 frames, fewer than 1500" in capsys.readouterr().out
    tvs = script.subsample_tvs(phi, psi, phi_b, psi_b, phi_b.size, 2)
    np.testing.assert_allclose(tvs, tv)  # every frame, in any order: the file's own TV
