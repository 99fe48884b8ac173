"""One JSON-ready dict of metrics per generator (what `metrics.json` holds per model).

Built from the pure functions of `bgp4.analysis.estimators`; energies in kT, angles in rad. Undefined
values (nan, inf) become None so that the dicts serialize directly; a sweep can aggregate
every numeric key over seeds.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from bgp4.analysis._arrays import _as_1d, _json_float, _same_length
from bgp4.analysis.estimators import (
    N_BINS,
    block_standard_error,
    energy_shift,
    energy_w2,
    low_energy_fraction,
    phi_positive_population,
    ramachandran_floor,
    ramachandran_kl,
    ramachandran_tv,
    state_free_energy,
    state_free_energy_error,
)
from bgp4.analysis.weights import (
    N_BOOTSTRAP,
    clipped_reverse_ess,
    log_weights,
    normalized_weights,
    reverse_ess,
    reverse_ess_interval,
)

__all__ = [
    "PAIR_KEYS",
    "PAIR_REWEIGHTED_KEYS",
    "REWEIGHTED_KEYS",
    "TorsionPair",
    "model_metrics",
    "state_summary",
    "summarize_reference",
]

#: Keys of one (phi, psi) pair's metrics: the molecule's own pair (flat in `model_metrics`) and
#: each residue's (under "residues").
PAIR_KEYS = (
    "ramachandran_kl",
    "ramachandran_tv",
    "ramachandran_kl_floor",
    "ramachandran_tv_floor",
    "ramachandran_floor_note",
    "p_phi_positive",
    "p_phi_positive_error",
    "dF_phi_kT",
    "dF_phi_error_kT",
)
#: The pair's keys that need importance weights.
PAIR_REWEIGHTED_KEYS = (
    "ramachandran_kl_reweighted",
    "ramachandran_tv_reweighted",
    "ramachandran_kl_floor_ess",
    "ramachandran_tv_floor_ess",
    "p_phi_positive_reweighted",
    "p_phi_positive_reweighted_error",
    "dF_phi_reweighted_kT",
    "dF_phi_reweighted_error_kT",
)
#: Keys of `model_metrics` that need importance weights: None (with `weights_note`) where
#: the weights are not defined.
REWEIGHTED_KEYS = (
    "reverse_ess",
    "reverse_ess_ci_low",
    "reverse_ess_ci_high",
    "reverse_ess_clipped",
    "energy_shift_reweighted_kT",
    "energy_w2_reweighted",
    *PAIR_REWEIGHTED_KEYS,
)


class TorsionPair(NamedTuple):
    """One residue's backbone torsions (rad): the model's samples (n,) and the MD frames'."""

    phi: np.ndarray
    psi: np.ndarray
    phi_md: np.ndarray
    psi_md: np.ndarray


def _energy_stats(u: np.ndarray) -> dict[str, float | int | None]:
    finite = u[np.isfinite(u)]
    return {
        "n_samples": int(u.size),
        "n_nonfinite": int(u.size - finite.size),
        "mean_energy_kT": _json_float(finite.mean()) if finite.size else None,
        "median_energy_kT": _json_float(np.median(finite)) if finite.size else None,
    }


def _states(phi: np.ndarray, weights: np.ndarray | None = None) -> tuple[float, float]:
    p = phi_positive_population(phi, weights)
    return p, state_free_energy(p)


def state_summary(phi: np.ndarray, groups: np.ndarray | None = None) -> dict[str, float | None]:
    """The phi > 0 state of MD frames with its block standard error, JSON-ready.

    Keys: p_phi_positive, p_phi_positive_se, dF_phi_kT, dF_phi_se_kT (kT); the errors by
    `block_standard_error` over the frames' `groups` (replica of each frame, None: one series).
    """
    angles = _as_1d(phi, "phi")
    p, d_f = _states(angles)
    with np.errstate(invalid="ignore"):
        positive = np.where(np.isfinite(angles), angles > 0, np.nan)
    se = block_standard_error(positive, groups)
    return {
        "p_phi_positive": _json_float(p),
        "p_phi_positive_se": _json_float(se),
        "dF_phi_kT": _json_float(d_f),
        "dF_phi_se_kT": _json_float(state_free_energy_error(p, se)),
    }


def summarize_reference(
    u_kT: np.ndarray,
    u_threshold: float,
    u_md_kT: np.ndarray | None = None,
    phi: np.ndarray | None = None,
    groups: np.ndarray | None = None,
) -> dict[str, float | int | None]:
    """Statistics of a reference column (MD data, MD + noise), JSON-ready.

    Keys: n_samples, n_nonfinite, mean_energy_kT, median_energy_kT, energy_shift_kT and
    energy_w2 (vs `u_md_kT`, None when not given), low_energy_fraction (u < `u_threshold`, kT),
    and with `phi` (rad) the keys of `state_summary` (block errors over `groups`).
    """
    u = _as_1d(u_kT, "u_kT")
    summary = _energy_stats(u)
    summary["energy_shift_kT"] = None if u_md_kT is None else _json_float(energy_shift(u, u_md_kT))
    summary["energy_w2"] = None if u_md_kT is None else _json_float(energy_w2(u_md_kT, u))
    summary["low_energy_fraction"] = _json_float(low_energy_fraction(u, u_threshold))
    if phi is not None:
        summary.update(state_summary(phi, groups))
    return summary


def model_metrics(
    u_model_kT: np.ndarray,
    log_q: np.ndarray | None,
    phi: np.ndarray | None,
    psi: np.ndarray | None,
    u_md_kT: np.ndarray,
    phi_md: np.ndarray | None,
    psi_md: np.ndarray | None,
    u_threshold: float,
    bins: int = N_BINS,
    *,
    weights_defined: bool,
    weights_note: str | None = None,
    n_boot: int = N_BOOTSTRAP,
    seed: int = 0,
    residues: Mapping[str, TorsionPair] | None = None,
) -> dict[str, Any]:
    """All metrics of one generator's samples against the MD data: one JSON-ready dict.

    Args:
        u_model_kT: (n,) reduced energies of the samples (kT); non-finite allowed (left out of
            the energy statistics and counted in n_nonfinite).
        log_q: (n,) log density of the samples under the flow, or None (no weights).
        phi: (n,) backbone torsion phi of the samples (rad); None for a molecule without a
            peptide backbone (every key of `PAIR_KEYS` and `PAIR_REWEIGHTED_KEYS` is None).
        psi: (n,) backbone torsion psi of the samples (rad), or None with `phi`.
        u_md_kT: the MD data's reduced energies (kT).
        phi_md: the MD data's phi (rad), or None with `phi`.
        psi_md: the MD data's psi (rad), or None with `phi`.
        u_threshold: low-energy threshold in kT (`low_energy_threshold` of the training set).
        weights_defined: whether p and q live on the same space (the run holds every
            constrained bond fixed); if False (or `log_q` is None) every key of
            `REWEIGHTED_KEYS` is None and `weights_note` says why.
        n_boot: bootstrap resamples of the ESS interval.
        seed: seed of the bootstrap and of the MD floors.
        residues: residue label -> `TorsionPair`; each gets the `PAIR_KEYS` and
            `PAIR_REWEIGHTED_KEYS` of its own pair under "residues" (absent when None). Every
            pair's MD floors are drawn from the same seeded stream state, so a residue whose
            torsions are the molecule's own pair gets the same numbers as the flat keys.

    Keys: the energy statistics (n_samples, n_nonfinite, mean/median_energy_kT, energy_shift_kT,
    low_energy_fraction, energy_w2), ramachandran_kl/_tv with their MD floors (an MD subsample
    of the model's size; None with ramachandran_floor_note when the model has at least as many
    samples as MD), p_phi_positive, dF_phi_kT and their errors vs MD (model - MD), n_zero_weight,
    weights_defined, weights_note, and `REWEIGHTED_KEYS` (reverse_ess_clipped: with the largest
    1e-4 of the log weights clipped, `clipped_reverse_ess`; the floors *_floor_ess at the
    effective sample size round(reverse_ess * n)).
    """
    u = _as_1d(u_model_kT, "u_model_kT")
    own = None if phi is None else _pair(TorsionPair(phi, psi, phi_md, psi_md), u.size)
    pairs = {label: _pair(pair, u.size) for label, pair in (residues or {}).items()}
    rng = np.random.default_rng(seed)  # one stream: the MD floor, the ESS bootstrap, the floor at the ESS
    start = copy.deepcopy(rng)
    summary: dict[str, Any] = _energy_metrics(u, _as_1d(u_md_kT, "u_md_kT"), u_threshold)
    summary.update(dict.fromkeys(PAIR_KEYS) if own is None else _angle_metrics(own, bins, rng))
    per_residue = {label: _angle_metrics(p, bins, copy.deepcopy(start)) for label, p in pairs.items()}
    summary.update(n_zero_weight=None, weights_defined=bool(weights_defined and log_q is not None), weights_note=None)
    summary.update(dict.fromkeys(REWEIGHTED_KEYS))
    for values in per_residue.values():
        values.update(dict.fromkeys(PAIR_REWEIGHTED_KEYS))
    if residues is not None:
        summary["residues"] = per_residue
    if log_q is None:
        summary["weights_note"] = "the samples carry no log q"
        return summary
    log_w = log_weights(u, log_q)
    summary["n_zero_weight"] = int(np.sum(~np.isfinite(log_w)))
    if not weights_defined:
        summary["weights_note"] = weights_note or "importance weights are not defined for this run"
        return summary
    weights, ess = normalized_weights(log_w), reverse_ess(log_w)
    summary.update(_weight_metrics(u, _as_1d(u_md_kT, "u_md_kT"), log_w, weights, ess, n_boot, rng))
    after = copy.deepcopy(rng)
    if own is not None:
        summary.update(_reweighted_angles(own, weights, ess, bins, rng))
    for label, pair in pairs.items():
        per_residue[label].update(_reweighted_angles(pair, weights, ess, bins, copy.deepcopy(after)))
    return summary


class _Pair(NamedTuple):
    """One (phi, psi) pair of the samples (rad) with the MD frames' and their phi > 0 state."""

    phi: np.ndarray
    psi: np.ndarray
    phi_md: np.ndarray
    psi_md: np.ndarray
    p_md: float
    dF_md: float


def _pair(pair: TorsionPair, n: int) -> _Pair:
    """Checked arrays of `pair` (the samples' angles one per sample of n) and the MD state."""
    phi, psi = _as_1d(pair.phi, "phi"), _as_1d(pair.psi, "psi")
    phi_md, psi_md = _as_1d(pair.phi_md, "phi_md"), _as_1d(pair.psi_md, "psi_md")
    _same_length(u_model_kT=np.empty(n), phi=phi, psi=psi)
    _same_length(phi_md=phi_md, psi_md=psi_md)
    return _Pair(phi, psi, phi_md, psi_md, *_states(phi_md))


def _n_angles(pair: _Pair) -> int:
    """Samples whose two torsions are both finite (those the Ramachandran histograms count)."""
    return int(np.count_nonzero(np.isfinite(pair.phi) & np.isfinite(pair.psi)))


def _energy_metrics(u: np.ndarray, u_md: np.ndarray, u_threshold: float) -> dict[str, Any]:
    """The unweighted energy statistics of the samples and their distance to MD's (kT)."""
    summary: dict[str, Any] = _energy_stats(u)
    summary.update(
        energy_shift_kT=_json_float(energy_shift(u, u_md)),
        low_energy_fraction=_json_float(low_energy_fraction(u, u_threshold)),
        energy_w2=_json_float(energy_w2(u_md, u)),
    )
    return summary


def _angle_metrics(pair: _Pair, bins: int, rng: np.random.Generator) -> dict[str, Any]:
    """Unweighted Ramachandran distances to MD with their MD floors, and the phi > 0 state vs MD's."""
    n_angles = _n_angles(pair)
    p_raw, df_raw = _states(pair.phi)
    kl_floor, tv_floor = ramachandran_floor(pair.phi_md, pair.psi_md, n_angles, bins, rng=rng)
    return dict(
        ramachandran_kl=_json_float(ramachandran_kl(pair.phi_md, pair.psi_md, pair.phi, pair.psi, bins)),
        ramachandran_tv=_json_float(ramachandran_tv(pair.phi_md, pair.psi_md, pair.phi, pair.psi, bins)),
        ramachandran_kl_floor=_json_float(kl_floor),
        ramachandran_tv_floor=_json_float(tv_floor),
        ramachandran_floor_note=None
        if math.isfinite(kl_floor) or n_angles == 0
        else (f"floor undefined: the model's {n_angles} samples are not fewer than the {len(pair.phi_md)} MD frames"),
        p_phi_positive=_json_float(p_raw),
        p_phi_positive_error=_json_float(p_raw - pair.p_md),
        dF_phi_kT=_json_float(df_raw),
        dF_phi_error_kT=_json_float(df_raw - pair.dF_md),
    )


def _weight_metrics(
    u: np.ndarray,
    u_md: np.ndarray,
    log_w: np.ndarray,
    weights: np.ndarray,
    ess: float,
    n_boot: int,
    rng: np.random.Generator,
) -> dict[str, float | None]:
    """The ESS with its bootstrap interval, the ESS as the field's table clips it, and the energy
    metrics under the weights."""
    low, high = reverse_ess_interval(log_w, n_boot, rng=rng)
    values = dict(
        reverse_ess=ess,
        reverse_ess_ci_low=low,
        reverse_ess_ci_high=high,
        reverse_ess_clipped=clipped_reverse_ess(log_w),
        energy_shift_reweighted_kT=energy_shift(u, u_md, weights),
        energy_w2_reweighted=energy_w2(u_md, u, weights),
    )
    return {k: _json_float(v) for k, v in values.items()}


def _reweighted_angles(
    pair: _Pair, weights: np.ndarray, ess: float, bins: int, rng: np.random.Generator
) -> dict[str, float | None]:
    """The `PAIR_REWEIGHTED_KEYS` of one pair: its distances and state under the weights, the
    floors at the effective sample size."""
    n_ess = round(ess * _n_angles(pair)) if ess == ess else 0  # ess is nan without a finite weight
    kl_ess, tv_ess = ramachandran_floor(pair.phi_md, pair.psi_md, n_ess, bins, rng=rng)
    p_rw, df_rw = _states(pair.phi, weights)
    values = dict(
        ramachandran_kl_reweighted=ramachandran_kl(pair.phi_md, pair.psi_md, pair.phi, pair.psi, bins, weights=weights),
        ramachandran_tv_reweighted=ramachandran_tv(pair.phi_md, pair.psi_md, pair.phi, pair.psi, bins, weights=weights),
        ramachandran_kl_floor_ess=kl_ess,
        ramachandran_tv_floor_ess=tv_ess,
        p_phi_positive_reweighted=p_rw,
        p_phi_positive_reweighted_error=p_rw - pair.p_md,
        dF_phi_reweighted_kT=df_rw,
        dF_phi_reweighted_error_kT=df_rw - pair.dF_md,
    )
    return {k: _json_float(v) for k, v in values.items()}
