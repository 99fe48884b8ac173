"""Sample-quality metrics for Boltzmann generators (paper section 4.4, REFERENCE section 6).

Pure functions on numpy arrays. Energies are reduced (u in kT at the data's temperature),
positions in nm, angles in radians on [-pi, pi]. Functions that can be undefined (no finite
samples, empty histograms) return nan; the `summarize_*` dicts turn nan into None so that they
serialize to JSON directly.
"""
from __future__ import annotations

import math
from typing import Any

import mdtraj
import numpy as np

from bgp4.errors import InputError
from bgp4.molecule import PHI, PSI

#: Default number of bins per axis for Ramachandran histograms and free-energy profiles.
N_BINS = 64
#: Density floor added to both histograms in the Ramachandran KL (REFERENCE section 6).
KL_EPS = 1e-10
#: Per-coordinate noise (nm) of the paper's perturbed-data reference.
NOISE_SIGMA_NM = 0.004


def _as_1d(values: Any, name: str) -> np.ndarray:
    """`values` as a float64 vector; raises InputError for anything that is not 1-d."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise InputError(f"{name} must be a 1-d array, got shape {array.shape}")
    return array


def _same_length(**arrays: np.ndarray) -> None:
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise InputError(f"arrays must have the same length, got {lengths}")


def _json_float(value: float) -> float | None:
    """A plain float for JSON, None where the value is undefined (nan or infinite)."""
    value = float(value)
    return value if math.isfinite(value) else None


# --------------------------------------------------------------------------- dihedrals


def backbone_dihedrals(xyz: np.ndarray, molecule_or_topology: Any) -> tuple[np.ndarray, np.ndarray]:
    """Backbone torsions (phi, psi), each (n,) float64 radians in [-pi, pi].

    Args:
        xyz: (n, n_atoms, 3) positions in nm (a single (n_atoms, 3) frame is accepted).
        molecule_or_topology: a `bgp4.molecule.Molecule` or an mdtraj Topology with the
            alanine-dipeptide atom order (phi = atoms 4-6-8-14, psi = 6-8-14-16).
    """
    topology = getattr(molecule_or_topology, "topology", molecule_or_topology)
    if not isinstance(topology, mdtraj.Topology):
        raise InputError(f"expected a Molecule or mdtraj.Topology, got {type(molecule_or_topology).__name__}")
    frames = np.asarray(xyz, dtype=np.float64)
    if frames.ndim == 2:
        frames = frames[None]
    if frames.ndim != 3 or frames.shape[1:] != (topology.n_atoms, 3):
        raise InputError(f"xyz must have shape (n, {topology.n_atoms}, 3) in nm, got {np.shape(xyz)}")
    if frames.shape[0] == 0:
        return np.zeros(0), np.zeros(0)
    trajectory = mdtraj.Trajectory(frames, topology)
    angles = mdtraj.compute_dihedrals(trajectory, np.array([PHI, PSI]), periodic=False)
    angles = angles.astype(np.float64)
    return angles[:, 0], angles[:, 1]


# --------------------------------------------------------------------------- energies


def energy_shift(u_model: np.ndarray, u_md: np.ndarray) -> float:
    """mean(u_model) - mean(u_md) in kT over finite energies; nan if either has none.

    Non-finite model energies are left out of the mean (`summarize_model` counts them).
    """
    model = _as_1d(u_model, "u_model")
    md = _as_1d(u_md, "u_md")
    model, md = model[np.isfinite(model)], md[np.isfinite(md)]
    if model.size == 0 or md.size == 0:
        return math.nan
    return float(model.mean() - md.mean())


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


def noisy_reference(xyz: np.ndarray, sigma: float = NOISE_SIGMA_NM,
                    rng: np.random.Generator | int | None = None) -> np.ndarray:
    """`xyz` (nm, any shape) plus independent N(0, sigma^2) noise per coordinate (sigma in nm)."""
    if not sigma >= 0:
        raise InputError(f"noise sigma must be >= 0 nm, got {sigma}")
    generator = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    positions = np.asarray(xyz, dtype=np.float64)
    return positions + generator.normal(0.0, sigma, size=positions.shape)


# --------------------------------------------------------------------------- importance weights


def log_weights(u: np.ndarray, log_q: np.ndarray) -> np.ndarray:
    """Unnormalized log importance weights log w = -u - log q, shape (n,).

    u is the reduced energy (kT) of flow samples and log q their log density under the flow.
    Any sample whose u or log q is not finite gets log w = -inf (weight zero): a sample with an
    undefined energy or density carries no usable information about the target.
    """
    energies = _as_1d(u, "u")
    log_density = _as_1d(log_q, "log_q")
    _same_length(u=energies, log_q=log_density)
    with np.errstate(invalid="ignore", over="ignore"):
        log_w = -energies - log_density
    log_w[~(np.isfinite(energies) & np.isfinite(log_density) & np.isfinite(log_w))] = -np.inf
    return log_w


def _clean_log_weights(log_w: np.ndarray) -> np.ndarray:
    """nan -> -inf; if any +inf, those samples share all the weight (the limit of huge weights)."""
    clean = np.where(np.isnan(log_w), -np.inf, log_w)
    infinite = np.isposinf(clean)
    if infinite.any():
        clean = np.where(infinite, 0.0, -np.inf)
    return clean


def normalized_weights(log_w: np.ndarray) -> np.ndarray:
    """Self-normalized weights (n,) summing to 1 from log weights; all zeros if no weight is positive.

    The maximum is subtracted before exponentiating, so log weights spanning thousands of kT
    neither overflow nor lose the dominant samples; nan and -inf entries get weight 0.
    """
    clean = _clean_log_weights(_as_1d(log_w, "log_w"))
    if clean.size == 0 or not np.isfinite(clean).any():
        return np.zeros_like(clean)
    shifted = np.exp(clean - clean.max())
    return shifted / shifted.sum()


def reverse_ess(log_w: np.ndarray) -> float:
    """Kish effective sample size per sample, (sum w)^2 / sum w^2 / N, in [0, 1].

    Computed as exp(2 logsumexp(log w) - logsumexp(2 log w) - log N) after subtracting max log w.
    Zero-weight entries (-inf, nan) count in N; 0.0 if no weight is positive; nan for N = 0.
    """
    clean = _clean_log_weights(_as_1d(log_w, "log_w"))
    n = clean.size
    if n == 0:
        return math.nan
    finite = clean[np.isfinite(clean)]
    if finite.size == 0:
        return 0.0
    scaled = np.exp(finite - finite.max())  # the largest term is 1, so both sums are >= 1
    log_ess = 2.0 * np.log(scaled.sum()) - np.log(np.square(scaled).sum()) - np.log(n)
    return float(min(1.0, np.exp(log_ess)))


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


def ramachandran_histogram(phi: np.ndarray, psi: np.ndarray, bins: int = N_BINS,
                           weights: np.ndarray | None = None) -> np.ndarray:
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


def ramachandran_kl(phi_md: np.ndarray, psi_md: np.ndarray, phi_model: np.ndarray, psi_model: np.ndarray,
                    bins: int = N_BINS, eps: float = KL_EPS, weights: np.ndarray | None = None) -> float:
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


def free_energy_1d(angle: np.ndarray, bins: int = N_BINS, weights: np.ndarray | None = None,
                   range: tuple[float, float] = (-np.pi, np.pi)) -> tuple[np.ndarray, np.ndarray]:
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


# --------------------------------------------------------------------------- summaries


def _energy_stats(u: np.ndarray) -> dict[str, float | int | None]:
    finite = u[np.isfinite(u)]
    return {
        "n_samples": int(u.size),
        "n_nonfinite": int(u.size - finite.size),
        "mean_energy_kT": _json_float(finite.mean()) if finite.size else None,
        "median_energy_kT": _json_float(np.median(finite)) if finite.size else None,
    }


def summarize_reference(u_kT: np.ndarray, u_threshold: float,
                        u_md_kT: np.ndarray | None = None) -> dict[str, float | int | None]:
    """Energy statistics of a reference column (MD data, MD + noise), JSON-ready.

    Keys: n_samples, n_nonfinite, mean_energy_kT, median_energy_kT, energy_shift_kT (vs
    `u_md_kT`, None when not given), low_energy_fraction (u < `u_threshold`, kT).
    """
    u = _as_1d(u_kT, "u_kT")
    summary = _energy_stats(u)
    summary["energy_shift_kT"] = None if u_md_kT is None else _json_float(energy_shift(u, u_md_kT))
    summary["low_energy_fraction"] = _json_float(low_energy_fraction(u, u_threshold))
    return summary


def summarize_model(u_model_kT: np.ndarray, log_q: np.ndarray | None, phi: np.ndarray, psi: np.ndarray,
                    u_md_kT: np.ndarray, phi_md: np.ndarray, psi_md: np.ndarray, u_threshold: float,
                    bins: int = N_BINS) -> dict[str, float | int | None]:
    """All metrics of one generator's samples against the MD data, JSON-ready.

    Args:
        u_model_kT: (n,) reduced energies of the samples (kT); non-finite allowed.
        log_q: (n,) log density of the samples under the flow, or None (no weights).
        phi, psi: (n,) backbone torsions of the samples (rad).
        u_md_kT, phi_md, psi_md: the MD data's energies (kT) and torsions (rad).
        u_threshold: low-energy threshold in kT (`low_energy_threshold` of the training set).

    Keys: n_samples, n_nonfinite, mean_energy_kT, median_energy_kT, energy_shift_kT,
    low_energy_fraction, reverse_ess, n_zero_weight, ramachandran_kl,
    ramachandran_kl_reweighted (None where undefined).
    """
    u = _as_1d(u_model_kT, "u_model_kT")
    phi_a, psi_a = _as_1d(phi, "phi"), _as_1d(psi, "psi")
    _same_length(u_model_kT=u, phi=phi_a, psi=psi_a)
    summary = _energy_stats(u)
    summary["energy_shift_kT"] = _json_float(energy_shift(u, u_md_kT))
    summary["low_energy_fraction"] = _json_float(low_energy_fraction(u, u_threshold))
    summary["ramachandran_kl"] = _json_float(ramachandran_kl(phi_md, psi_md, phi_a, psi_a, bins))
    if log_q is None:
        summary.update(reverse_ess=None, n_zero_weight=None, ramachandran_kl_reweighted=None)
        return summary
    log_w = log_weights(u, log_q)
    summary["reverse_ess"] = _json_float(reverse_ess(log_w))
    summary["n_zero_weight"] = int(np.sum(~np.isfinite(log_w)))
    weights = normalized_weights(log_w)
    summary["ramachandran_kl_reweighted"] = _json_float(
        ramachandran_kl(phi_md, psi_md, phi_a, psi_a, bins, weights=weights))
    return summary
