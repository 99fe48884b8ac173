"""Sample-quality metrics for Boltzmann generators (paper section 4.4, REFERENCE section 6).

Pure functions on numpy arrays. Energies are reduced (u in kT at the data's temperature),
positions in nm, angles in radians on [-pi, pi]. Functions that can be undefined (no finite
samples, empty histograms) return nan; `bgp4.analysis.metrics` gathers them into JSON-ready dicts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bgp4.analysis._arrays import _as_1d, _same_length
from bgp4.analysis.grid import N_BINS  # noqa: F401 - re-exported: the default grid with the histograms
from bgp4.analysis.residues import dihedral_angles
from bgp4.analysis.weights import (  # noqa: F401 - re-exported: the metric functions in one namespace
    CI_LEVEL,
    N_BOOTSTRAP,
    log_weights,
    normalized_weights,
    reverse_ess,
    reverse_ess_interval,
)
from bgp4.errors import InputError

__all__ = [
    "CI_LEVEL",
    "KL_EPS",
    "NOISE_KEY",
    "NOISE_SIGMA_NM",
    "N_BINS",
    "N_BLOCKS",
    "N_BOOTSTRAP",
    "angle_edges",
    "backbone_dihedrals",
    "block_standard_error",
    "energy_shift",
    "energy_w2",
    "free_energy_1d",
    "log_weights",
    "low_energy_fraction",
    "low_energy_threshold",
    "noisy_reference",
    "normalized_weights",
    "phi_positive_population",
    "ramachandran_floor",
    "ramachandran_histogram",
    "ramachandran_kl",
    "ramachandran_tv",
    "reverse_ess",
    "reverse_ess_interval",
    "state_free_energy",
    "state_free_energy_error",
    "weighted_quantile",
]

#: Density floor added to both histograms in the Ramachandran KL (REFERENCE section 6).
KL_EPS = 1e-10
#: Per-coordinate noise (nm) of the paper's perturbed-data reference.
NOISE_SIGMA_NM = 0.004
#: Its entry in a report's metrics.json: "md_noise_0.004nm".
NOISE_KEY = f"md_noise_{NOISE_SIGMA_NM}nm"
#: Contiguous blocks of an MD series for the block standard error of its mean.
N_BLOCKS = 20


# --------------------------------------------------------------------------- dihedrals


def backbone_dihedrals(xyz: np.ndarray, molecule: Any) -> tuple[np.ndarray, np.ndarray]:
    """Backbone torsions (phi, psi) of the molecule's own pair, each (n,) float64 radians in [-pi, pi].

    Args:
        xyz: (n, n_atoms, 3) positions in nm (a single (n_atoms, 3) frame is accepted).
        molecule: a `bgp4.simulation.molecule.Molecule`: its topology, and its `phi` / `psi` atom
            4-tuples (for a longer peptide, those of the central residue; every residue's are in
            `bgp4.analysis.residues`).
    """
    if not getattr(molecule, "phi", None) or not getattr(molecule, "psi", None):  # () without a backbone
        raise InputError(f"expected a bgp4 Molecule with backbone torsions, got {type(molecule).__name__}")
    angles = dihedral_angles(xyz, molecule, [molecule.phi, molecule.psi])
    return angles[:, 0], angles[:, 1]


# --------------------------------------------------------------------------- energies


def energy_shift(u_model: np.ndarray, u_md: np.ndarray, weights: np.ndarray | None = None) -> float:
    """mean(u_model) - mean(u_md) in kT over finite energies; nan if either has none.

    Non-finite model energies are left out of the mean (`model_metrics` counts them); `weights`
    (linear, non-negative, one per model sample) give the reweighted shift.

    Example:
        >>> energy_shift(np.array([1.0, 3.0, np.inf]), np.array([0.0, 1.0]))
        1.5
    """
    model = _as_1d(u_model, "u_model")
    w = _histogram_weights(weights, model.size)
    md = _as_1d(u_md, "u_md")
    keep = np.isfinite(model) & (w > 0)
    md = md[np.isfinite(md)]
    if not keep.any() or md.size == 0:
        return math.nan
    return float(np.average(model[keep], weights=w[keep]) - md.mean())


def _quantile_function(values: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(sorted finite values with positive weight, their cumulative probabilities ending at exactly 1)."""
    x = _as_1d(values, "values")
    w = _histogram_weights(weights, x.size)
    keep = np.isfinite(x) & (w > 0)
    x, w = x[keep], w[keep]
    order = np.argsort(x, kind="stable")
    cumulative = np.cumsum(w[order])
    if cumulative.size:
        cumulative = cumulative / cumulative[-1]
        cumulative[-1] = 1.0  # so that every probability in [0, 1] has a quantile
    return x[order], cumulative


def weighted_quantile(values: np.ndarray, probs: Any, weights: np.ndarray | None = None) -> np.ndarray:
    """Inverse-CDF quantiles: for each p, the smallest x with F(x) >= p, F the (weighted) empirical CDF.

    Non-finite values and zero weights are left out. With equal weights this is numpy's
    `quantile(..., method="inverted_cdf")`. Returns an array shaped like `probs` (nan if no value).
    """
    p = np.asarray(probs, dtype=np.float64)
    if np.any(~((p >= 0) & (p <= 1))):
        raise InputError("quantile probabilities must lie in [0, 1]")
    x, cumulative = _quantile_function(values, weights)
    if x.size == 0:
        return np.full(p.shape, np.nan)
    return x[np.minimum(np.searchsorted(cumulative, p, side="left"), x.size - 1)]


def energy_w2(u_md: np.ndarray, u_model: np.ndarray, weights: np.ndarray | None = None) -> float:
    """1-d Wasserstein-2 distance (kT) between MD and model energy distributions.

    W2^2 = integral over t in (0, 1] of (Q_md(t) - Q_model(t))^2, Q the (weighted) quantile
    functions; both are step functions, so the integral is an exact sum over the union of
    their steps. Non-finite energies are left out (count them separately); `weights` (linear,
    non-negative) reweight the model. nan if either side has no finite energy. Never below
    |energy_shift| (Jensen), and equal to it for a pure shift.

    Example:
        >>> energy_w2(np.array([0.0, 1.0, 2.0]), np.array([0.5, 1.5, 2.5]))  # a pure shift
        0.5
    """
    x_md, c_md = _quantile_function(u_md, None)
    x_model, c_model = _quantile_function(u_model, weights)
    if x_md.size == 0 or x_model.size == 0:
        return math.nan
    steps = np.union1d(c_md, c_model)
    widths = np.diff(steps, prepend=0.0)
    q_md = x_md[np.minimum(np.searchsorted(c_md, steps, side="left"), x_md.size - 1)]
    q_model = x_model[np.minimum(np.searchsorted(c_model, steps, side="left"), x_model.size - 1)]
    return float(np.sqrt(np.sum(widths * np.square(q_md - q_model))))


def low_energy_threshold(u_train: np.ndarray) -> float:
    """The paper's threshold: the largest finite training-set energy (kT)."""
    train = _as_1d(u_train, "u_train")
    train = train[np.isfinite(train)]
    if train.size == 0:
        raise InputError("the training energies hold no finite value, so there is no low-energy threshold")
    return float(train.max())


def low_energy_fraction(u: np.ndarray, threshold: float) -> float:
    """Share of samples with u < threshold (both kT); non-finite u counts as not low; nan if empty."""
    energies = _as_1d(u, "u")
    if energies.size == 0:
        return math.nan
    with np.errstate(invalid="ignore"):
        low = np.isfinite(energies) & (energies < threshold)
    return float(low.mean())


def noisy_reference(
    xyz: np.ndarray, sigma: float = NOISE_SIGMA_NM, rng: np.random.Generator | int | None = None
) -> np.ndarray:
    """`xyz` (nm, any shape) plus independent N(0, sigma^2) noise per coordinate (sigma in nm)."""
    if not sigma >= 0:
        raise InputError(f"noise sigma must be >= 0 nm, got {sigma}")
    generator = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    positions = np.asarray(xyz, dtype=np.float64)
    return positions + generator.normal(0.0, sigma, size=positions.shape)


# --------------------------------------------------------------------------- histograms


def angle_edges(bins: int = N_BINS) -> np.ndarray:
    """(bins + 1,) bin edges on [-pi, pi] in radians."""
    if int(bins) < 1:
        raise InputError(f"bins must be >= 1, got {bins}")
    return np.linspace(-np.pi, np.pi, int(bins) + 1)


def _histogram_weights(weights: Any | None, n: int) -> np.ndarray:
    """Linear weights (n,) with non-finite entries set to 0; ones when `weights` is None."""
    if weights is None:
        return np.ones(n)
    values = _as_1d(weights, "weights")
    if values.size != n:
        raise InputError(f"weights must have one entry per sample ({n}), got {values.size}")
    values = np.where(np.isfinite(values), values, 0.0)
    if (values < 0).any():
        raise InputError("histogram weights must be >= 0 (pass normalized_weights(log_w), not log weights)")
    return values


def ramachandran_histogram(
    phi: np.ndarray, psi: np.ndarray, bins: int = N_BINS, weights: np.ndarray | None = None
) -> np.ndarray:
    """(bins, bins) probability density on [-pi, pi]^2 (per rad^2), indexed [phi bin, psi bin].

    Samples with non-finite angles are dropped; `weights` are linear and non-negative (non-finite
    entries count as zero). All zeros if no weight remains.
    """
    phi_a, psi_a = _as_1d(phi, "phi"), _as_1d(psi, "psi")
    _same_length(phi=phi_a, psi=psi_a)
    w = _histogram_weights(weights, phi_a.size)
    keep = np.isfinite(phi_a) & np.isfinite(psi_a) & (w > 0)
    edges = angle_edges(bins)
    if w[keep].sum() <= 0:
        return np.zeros((edges.size - 1, edges.size - 1))
    counts, _, _ = np.histogram2d(phi_a[keep], psi_a[keep], bins=(edges, edges), weights=w[keep])
    area = (edges[1] - edges[0]) ** 2
    return counts / (counts.sum() * area)


def ramachandran_kl(
    phi_md: np.ndarray,
    psi_md: np.ndarray,
    phi_model: np.ndarray,
    psi_model: np.ndarray,
    bins: int = N_BINS,
    eps: float = KL_EPS,
    weights: np.ndarray | None = None,
) -> float:
    """KL(MD || model) of (phi, psi) histograms: sum (p+eps) ln((p+eps)/(q+eps)) * bin area.

    p and q are densities per rad^2 on a bins x bins grid over [-pi, pi]^2; `weights` (linear,
    non-negative) reweight the model samples. nan if either histogram is empty.
    """
    p = ramachandran_histogram(phi_md, psi_md, bins)
    q = ramachandran_histogram(phi_model, psi_model, bins, weights=weights)
    if not p.any() or not q.any():
        return math.nan
    edges = angle_edges(bins)
    area = (edges[1] - edges[0]) ** 2
    p, q = p + eps, q + eps
    return float(np.sum(p * np.log(p / q)) * area)


def ramachandran_tv(
    phi_md: np.ndarray,
    psi_md: np.ndarray,
    phi_model: np.ndarray,
    psi_model: np.ndarray,
    bins: int = N_BINS,
    weights: np.ndarray | None = None,
) -> float:
    """Total variation 0.5 * sum |P_i - Q_i| of the (phi, psi) bin probabilities, in [0, 1].

    Same bins and `weights` as `ramachandran_kl`; no density floor is needed. nan if either
    histogram is empty.
    """
    p = ramachandran_histogram(phi_md, psi_md, bins)
    q = ramachandran_histogram(phi_model, psi_model, bins, weights=weights)
    if not p.any() or not q.any():
        return math.nan
    area = (2 * np.pi / int(bins)) ** 2
    return float(0.5 * np.abs(p - q).sum() * area)


def ramachandran_floor(
    phi_md: np.ndarray, psi_md: np.ndarray, n: int, bins: int = N_BINS, rng: np.random.Generator | int | None = 0
) -> tuple[float, float]:
    """Sampling floor (KL, TV) of a model with n samples: a seeded subsample of n MD frames
    scored as the model against the other MD frames as the reference.

    Even a perfect model's histogram distances are this large at n samples. (nan, nan) when
    n < 1 or n >= the number of MD frames (no frames left to compare with).
    """
    phi_a, psi_a = _as_1d(phi_md, "phi_md"), _as_1d(psi_md, "psi_md")
    _same_length(phi_md=phi_a, psi_md=psi_a)
    n = int(n)
    if n < 1 or n >= phi_a.size:
        return math.nan, math.nan
    generator = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    held_out = np.zeros(phi_a.size, dtype=bool)
    held_out[generator.choice(phi_a.size, size=n, replace=False)] = True
    rest = ~held_out
    return (
        ramachandran_kl(phi_a[rest], psi_a[rest], phi_a[held_out], psi_a[held_out], bins),
        ramachandran_tv(phi_a[rest], psi_a[rest], phi_a[held_out], psi_a[held_out], bins),
    )


# --------------------------------------------------------------------------- metastable states


def phi_positive_population(phi: np.ndarray, weights: np.ndarray | None = None) -> float:
    """(Weighted) share of samples with phi > 0 (alpha_L and C7ax); non-finite phi are left out; nan if none."""
    values = _as_1d(phi, "phi")
    w = _histogram_weights(weights, values.size)
    keep = np.isfinite(values) & (w > 0)
    if not keep.any():
        return math.nan
    return float(w[keep][values[keep] > 0].sum() / w[keep].sum())


def state_free_energy(p_positive: float) -> float:
    """dF = -ln(P(phi > 0) / P(phi < 0)) in kT; +inf at P = 0, -inf at P = 1, nan for nan."""
    p = float(p_positive)
    if math.isnan(p):
        return math.nan
    if p <= 0.0:
        return math.inf
    if p >= 1.0:
        return -math.inf
    return -math.log(p / (1.0 - p))


def state_free_energy_error(p_positive: float, standard_error: float) -> float:
    """Standard error of dF = -ln(P / (1 - P)) (kT) from that of P, by the delta method:
    SE_P / (P (1 - P)); nan at P = 0 or 1 or without an error of P."""
    p, se = float(p_positive), float(standard_error)
    return se / (p * (1.0 - p)) if 0.0 < p < 1.0 else math.nan


def block_standard_error(values: np.ndarray, groups: np.ndarray | None = None, n_blocks: int = N_BLOCKS) -> float:
    """Standard error of the mean of a correlated series (an MD observable), by block averaging.

    The finite `values` (n,) are cut into contiguous blocks of about n / `n_blocks` frames, each
    within one group (`groups` (n,): the replica of each frame, frames of a replica in time order;
    None: one series). A tail block shorter than half a block is left out, since its mean is
    noisy. The error is that of the block means weighted by block length (the method of
    run/scripts/md_reference.py); nan with fewer than two blocks. It holds when a block is much
    longer than the series' correlation time.
    """
    x = _as_1d(values, "values")
    labels = np.zeros(x.size, dtype=np.int64) if groups is None else np.asarray(groups).ravel()
    _same_length(values=x, groups=labels)
    if int(n_blocks) < 2:
        raise InputError(f"n_blocks must be >= 2, got {n_blocks}")
    keep = np.isfinite(x)
    x, labels = x[keep], labels[keep]
    length = max(1, x.size // int(n_blocks))
    means, sizes = [], []
    for label in np.unique(labels):
        part = x[labels == label]
        for start in range(0, part.size, length):
            block = part[start : start + length]
            if 2 * block.size >= length:
                means.append(block.mean())
                sizes.append(block.size)
    if len(means) < 2:
        return math.nan
    share = np.asarray(sizes, dtype=np.float64) / np.sum(sizes)
    block_means = np.asarray(means)
    mean = float(np.sum(share * block_means))
    return float(np.sqrt(np.sum(share * (block_means - mean) ** 2) / (len(means) - 1)))


def free_energy_1d(
    angle: np.ndarray,
    bins: int = N_BINS,
    weights: np.ndarray | None = None,
    range: tuple[float, float] = (-np.pi, np.pi),
) -> tuple[np.ndarray, np.ndarray]:
    """Free-energy profile F = -ln p (kT) along one angle, shifted so that min F = 0.

    Returns (bin centers (bins,) rad, F (bins,) kT); empty bins are nan (gaps in a line plot),
    all nan if no sample (or weight) falls in the range.
    """
    values = _as_1d(angle, "angle")
    w = _histogram_weights(weights, values.size)
    if int(bins) < 1:
        raise InputError(f"bins must be >= 1, got {bins}")
    edges = np.linspace(float(range[0]), float(range[1]), int(bins) + 1)
    centers = 0.5 * (edges[:-1] + edges[1:])
    keep = np.isfinite(values) & (w > 0)
    counts, _ = np.histogram(values[keep], bins=edges, weights=w[keep])
    free = np.full(centers.shape, np.nan)
    filled = counts > 0
    if filled.any():
        free[filled] = -np.log(counts[filled])
        free -= np.nanmin(free)
    return centers, free
