"""Importance weights of generator samples: log w = -u - log q, self-normalized weights, the
Kish reverse effective sample size with a bootstrap interval, its lineage form for SMC, its form
with the largest log weights clipped (the field's table), and the forward ESS on MD frames.

Pure functions on numpy arrays; u in kT, log q in nats. Zero weight (log w = -inf) for any sample
whose energy or density is undefined.
"""

from __future__ import annotations

import math

import numpy as np

from bgp4.analysis._arrays import _as_1d, _same_length
from bgp4.errors import InputError

__all__ = [
    "CI_LEVEL",
    "CLIP_FRACTION",
    "N_BOOTSTRAP",
    "clip_log_weights",
    "clipped_reverse_ess",
    "forward_ess",
    "lineage_ess",
    "log_weights",
    "normalized_weights",
    "reverse_ess",
    "reverse_ess_interval",
]


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
    """nan -> -inf (weight zero); if any +inf, those samples share all the weight and every other
    sample gets none: the limit of weights that grow without bound, so that an estimate built on
    them says it is dominated by those samples rather than coming out nan or finite and wrong."""
    clean = np.where(np.isnan(log_w), -np.inf, log_w)
    infinite = np.isposinf(clean)
    if infinite.any():
        clean = np.where(infinite, 0.0, -np.inf)
    return clean


def normalized_weights(log_w: np.ndarray) -> np.ndarray:
    """Self-normalized weights (n,) summing to 1 from log weights; all zeros if no weight is positive.

    The maximum is subtracted before exponentiating, so log weights spanning thousands of kT
    neither overflow nor lose the dominant samples; nan and -inf entries get weight 0; if any entry
    is +inf, the +inf entries share the weight equally (the limit of unbounded weights).
    """
    clean = _clean_log_weights(_as_1d(log_w, "log_w"))
    if clean.size == 0 or not np.isfinite(clean).any():
        return np.zeros_like(clean)
    shifted = np.exp(clean - clean.max())
    return shifted / shifted.sum()


def reverse_ess(log_w: np.ndarray) -> float:
    """Kish effective sample size per sample, (sum w)^2 / sum w^2 / N, in [0, 1]: the one Kish ESS
    of bgp4 (AIS refinement's resampling test uses it too).

    Computed as exp(2 logsumexp(log w) - logsumexp(2 log w) - log N) after subtracting max log w.
    Zero-weight entries (-inf, nan) count in N; 0.0 if no weight is positive; nan for N = 0.
    Entries of +inf share all the weight (k of them give k / N), see `normalized_weights`.
    `log_w` may be any 1-d array-like on the CPU (numpy, list, CPU torch tensor).
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


#: Share of the largest log weights that the field's table clips before the Kish formula
#: (von Klitzing et al. 2025, table 1).
CLIP_FRACTION = 1e-4


def clip_log_weights(log_w: np.ndarray, fraction: float = CLIP_FRACTION) -> np.ndarray:
    """Log weights (n,) with every one above the k-th largest lowered to it, k = int(n * fraction):
    the table's rule, as the evaluation code of its lineage computes it (TA-BG, Schopmans and
    Friederich 2025, `calculate_reverse_ESS`).

    n counts every sample, zero weights included. k - 1 weights change (99 of 1,000,000 samples,
    1 of 20,000 at 1e-4), lowered, not dropped, so n stays the same; with k < 2 (under 20,000
    samples at 1e-4) none does, nor when fewer than k weights are positive. Zero weights (nan,
    -inf) stay zero. bgp4's figures made before commit `a69d6f3` clamped to the (1 - fraction) quantile
    instead, which lowers one more weight (2 of 20,000) and clips below 20,000 samples too.

    >>> clip_log_weights(np.r_[np.zeros(19_998), 8.0, 9.0])[-2:]  # only the largest is lowered
    array([8., 8.])
    """
    if not 0.0 <= float(fraction) < 1.0:
        raise InputError(f"the clipped fraction must lie in [0, 1), got {fraction}")
    clean = _clean_log_weights(_as_1d(log_w, "log_w"))
    k = int(clean.size * float(fraction))
    finite = clean[np.isfinite(clean)]
    if k < 2 or finite.size < k:
        return clean
    kth_largest = np.partition(finite, finite.size - k)[finite.size - k]
    return np.minimum(clean, kth_largest)


def clipped_reverse_ess(log_w: np.ndarray, fraction: float = CLIP_FRACTION) -> float:
    """`reverse_ess` of the log weights with their largest `fraction` clipped (`clip_log_weights`):
    the reverse ESS as the field's table computes it. Never below the plain reverse ESS, since
    clipping only evens the weights out."""
    return reverse_ess(clip_log_weights(log_w, fraction))


def forward_ess(log_w: np.ndarray) -> float:
    """Forward effective sample size per sample, from log weights of frames drawn from the target.

    With w_i = p~(x_i) / q(x_i) for x_i ~ p (MD frames; log w = -u - log q, p~ = exp(-u)
    unnormalized), the normalizer is Z = 1 / E_p[1/w], so E_q[(p/q)^2] = E_p[p/q] =
    mean(w) mean(1/w), and ESS / N = 1 / (mean(w) mean(1/w)) = N^2 / (sum w * sum 1/w), in (0, 1]
    (Midgley et al. 2023, "Flow annealed importance sampling bootstrap", ICLR, appendix; the
    forward ESS of the field's later tables). It sees modes that q misses, where the reverse ESS
    cannot: a frame where q vanishes gives w = inf and ESS 0. A log weight of nan (an undefined
    log q) counts as such a frame; nan for N = 0.
    """
    values = _as_1d(log_w, "log_w")
    if values.size == 0:
        return math.nan
    values = np.where(np.isnan(values), np.inf, values)
    if not np.isfinite(values).all():
        return 0.0  # a weight of 0 or inf makes sum w * sum 1/w infinite
    shift = values.max()  # ESS is scale-free: shift so that neither sum overflows
    high, low = values - shift, shift - values  # log w and log(1/w), shifted; max of the first is 0
    log_sums = np.log(np.exp(high).sum()) + low.max() + np.log(np.exp(low - low.max()).sum())
    return float(min(1.0, np.exp(2.0 * np.log(values.size) - log_sums)))


def lineage_ess(log_w: np.ndarray, ancestor: np.ndarray) -> float:
    """Kish ESS per sample with the samples of one SMC lineage counted as one weighted sample.

    After resampling, copies of one starting sample carry equal weights and the plain Kish ESS
    counts each copy as independent, so it overstates; summing the weights within each lineage
    (`ancestor` (n,): the starting sample each one descends from) and taking the Kish ESS of those
    sums over N treats the copies as fully correlated instead, a lower estimate. Without resampling
    every lineage holds one sample and this equals `reverse_ess`.
    """
    clean = _clean_log_weights(_as_1d(log_w, "log_w"))
    lineage = _as_1d(ancestor, "ancestor")
    _same_length(log_w=clean, ancestor=lineage)
    n = clean.size
    if n == 0:
        return math.nan
    finite = np.isfinite(clean)
    if not finite.any():
        return 0.0
    scaled = np.exp(clean[finite] - clean[finite].max())
    _, which = np.unique(lineage[finite], return_inverse=True)
    summed = np.bincount(which, weights=scaled)
    return float(min(1.0, np.square(summed.sum()) / np.square(summed).sum() / n))


#: Bootstrap resamples for the reverse ESS interval, and the interval's coverage.
N_BOOTSTRAP = 200
CI_LEVEL = 0.95
_BOOTSTRAP_CHUNK = 4_000_000  # gathered log weights per chunk (32 MB of float64)


def reverse_ess_interval(
    log_w: np.ndarray, n_boot: int = N_BOOTSTRAP, level: float = CI_LEVEL, rng: np.random.Generator | int | None = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval (low, high) of `reverse_ess`.

    The n samples are resampled with replacement `n_boot` times (seeded by `rng`) and the Kish
    ESS per sample of each resample is computed in log space per resample, so a resample that
    misses the largest weights does not underflow. (nan, nan) for n = 0; (0, 0) when no weight
    is positive.
    """
    clean = _clean_log_weights(_as_1d(log_w, "log_w"))
    if int(n_boot) < 1 or not 0.0 < level < 1.0:
        raise InputError(f"need n_boot >= 1 and 0 < level < 1, got {n_boot} and {level}")
    n = clean.size
    if n == 0:
        return math.nan, math.nan
    if not np.isfinite(clean).any():
        return 0.0, 0.0
    generator = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    ess = np.empty(int(n_boot))
    rows = max(1, _BOOTSTRAP_CHUNK // n)
    for start in range(0, int(n_boot), rows):
        gathered = clean[generator.integers(0, n, size=(min(rows, int(n_boot) - start), n))]
        top = gathered.max(axis=1, keepdims=True)
        alive = np.isfinite(top[:, 0])
        scaled = np.exp(gathered[alive] - top[alive])  # the largest term of each row is 1
        part = np.zeros(gathered.shape[0])
        part[alive] = np.square(scaled.sum(axis=1)) / np.square(scaled).sum(axis=1) / n
        ess[start : start + part.size] = part
    low, high = np.quantile(np.minimum(ess, 1.0), [(1.0 - level) / 2, (1.0 + level) / 2])
    return float(low), float(high)
