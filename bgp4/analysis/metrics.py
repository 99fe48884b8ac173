"""One flat, JSON-ready dict of metrics per generator (what `metrics.json` holds per model).

Built from the pure functions of `bgp4.analysis.estimators`; energies in kT, angles in rad. Undefined
values (nan, inf) become None so that the dicts serialize directly; a sweep can aggregate
every numeric key over seeds.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from bgp4.analysis._arrays import _as_1d, _json_float, _same_length
from bgp4.analysis.estimators import (
    N_BINS,
    energy_shift,
    energy_w2,
    low_energy_fraction,
    phi_positive_population,
    ramachandran_floor,
    ramachandran_kl,
    ramachandran_tv,
    state_free_energy,
)
from bgp4.analysis.weights import N_BOOTSTRAP, log_weights, normalized_weights, reverse_ess, reverse_ess_interval

__all__ = ["REWEIGHTED_KEYS", "model_metrics", "summarize_reference"]

#: Keys of `model_metrics` that need importance weights: None (with `weights_note`) where
#: the weights are not defined.
REWEIGHTED_KEYS = (
    "reverse_ess",
    "reverse_ess_ci_low",
    "reverse_ess_ci_high",
    "energy_shift_reweighted_kT",
    "energy_w2_reweighted",
    "ramachandran_kl_reweighted",
    "ramachandran_tv_reweighted",
    "ramachandran_kl_floor_ess",
    "ramachandran_tv_floor_ess",
    "p_phi_positive_reweighted",
    "p_phi_positive_reweighted_error",
    "dF_phi_reweighted_kT",
    "dF_phi_reweighted_error_kT",
)


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


def summarize_reference(
    u_kT: np.ndarray, u_threshold: float, u_md_kT: np.ndarray | None = None, phi: np.ndarray | None = None
) -> dict[str, float | int | None]:
    """Statistics of a reference column (MD data, MD + noise), JSON-ready.

    Keys: n_samples, n_nonfinite, mean_energy_kT, median_energy_kT, energy_shift_kT and
    energy_w2 (vs `u_md_kT`, None when not given), low_energy_fraction (u < `u_threshold`, kT),
    and with `phi` (rad): p_phi_positive, dF_phi_kT.
    """
    u = _as_1d(u_kT, "u_kT")
    summary = _energy_stats(u)
    summary["energy_shift_kT"] = None if u_md_kT is None else _json_float(energy_shift(u, u_md_kT))
    summary["energy_w2"] = None if u_md_kT is None else _json_float(energy_w2(u_md_kT, u))
    summary["low_energy_fraction"] = _json_float(low_energy_fraction(u, u_threshold))
    if phi is not None:
        p, d_f = _states(phi)
        summary.update(p_phi_positive=_json_float(p), dF_phi_kT=_json_float(d_f))
    return summary


def model_metrics(
    u_model_kT: np.ndarray,
    log_q: np.ndarray | None,
    phi: np.ndarray,
    psi: np.ndarray,
    u_md_kT: np.ndarray,
    phi_md: np.ndarray,
    psi_md: np.ndarray,
    u_threshold: float,
    bins: int = N_BINS,
    *,
    weights_defined: bool,
    weights_note: str | None = None,
    n_boot: int = N_BOOTSTRAP,
    seed: int = 0,
) -> dict[str, Any]:
    """All metrics of one generator's samples against the MD data: one flat, JSON-ready dict.

    Args:
        u_model_kT: (n,) reduced energies of the samples (kT); non-finite allowed (left out of
            the energy statistics and counted in n_nonfinite).
        log_q: (n,) log density of the samples under the flow, or None (no weights).
        phi: (n,) backbone torsion phi of the samples (rad).
        psi: (n,) backbone torsion psi of the samples (rad).
        u_md_kT: the MD data's reduced energies (kT).
        phi_md: the MD data's phi (rad).
        psi_md: the MD data's psi (rad).
        u_threshold: low-energy threshold in kT (`low_energy_threshold` of the training set).
        weights_defined: whether p and q live on the same space (the run holds every
            constrained bond fixed); if False (or `log_q` is None) every key of
            `REWEIGHTED_KEYS` is None and `weights_note` says why.
        n_boot: bootstrap resamples of the ESS interval.
        seed: seed of the bootstrap and of the MD floor.

    Keys: the energy statistics (n_samples, n_nonfinite, mean/median_energy_kT, energy_shift_kT,
    low_energy_fraction, energy_w2), ramachandran_kl/_tv with their MD floors (an MD subsample
    of the model's size; None with ramachandran_floor_note when the model has at least as many
    samples as MD), p_phi_positive, dF_phi_kT and their errors vs MD (model - MD), n_zero_weight,
    weights_defined, weights_note, and `REWEIGHTED_KEYS` (the floors *_floor_ess at the
    effective sample size round(reverse_ess * n)).
    """
    u = _as_1d(u_model_kT, "u_model_kT")
    phi_a, psi_a = _as_1d(phi, "phi"), _as_1d(psi, "psi")
    _same_length(u_model_kT=u, phi=phi_a, psi=psi_a)
    rng = np.random.default_rng(seed)  # one stream: the MD floor, the ESS bootstrap, the floor at the ESS
    md = _Reference(u_md_kT, phi_md, psi_md, *_states(phi_md))
    summary: dict[str, Any] = _energy_metrics(u, md, u_threshold)
    summary.update(_angle_metrics(phi_a, psi_a, md, bins, rng))
    summary.update(n_zero_weight=None, weights_defined=bool(weights_defined and log_q is not None), weights_note=None)
    summary.update(dict.fromkeys(REWEIGHTED_KEYS))
    if log_q is None:
        summary["weights_note"] = "the samples carry no log q"
        return summary
    log_w = log_weights(u, log_q)
    summary["n_zero_weight"] = int(np.sum(~np.isfinite(log_w)))
    if not weights_defined:
        summary["weights_note"] = weights_note or "importance weights are not defined for this run"
        return summary
    summary.update(_reweighted_metrics(u, log_w, phi_a, psi_a, md, bins, n_boot, rng))
    return summary


class _Reference(NamedTuple):
    """The MD data a generator is compared with: energies (kT), torsions (rad), its phi > 0 state."""

    u_kT: np.ndarray
    phi: np.ndarray
    psi: np.ndarray
    p_phi_positive: float
    dF_phi_kT: float


def _n_angles(phi: np.ndarray, psi: np.ndarray) -> int:
    """Samples whose two torsions are both finite (those the Ramachandran histograms count)."""
    return int(np.count_nonzero(np.isfinite(phi) & np.isfinite(psi)))


def _energy_metrics(u: np.ndarray, md: _Reference, u_threshold: float) -> dict[str, Any]:
    """The unweighted energy statistics of the samples and their distance to MD's (kT)."""
    summary: dict[str, Any] = _energy_stats(u)
    summary.update(
        energy_shift_kT=_json_float(energy_shift(u, md.u_kT)),
        low_energy_fraction=_json_float(low_energy_fraction(u, u_threshold)),
        energy_w2=_json_float(energy_w2(md.u_kT, u)),
    )
    return summary


def _angle_metrics(
    phi: np.ndarray, psi: np.ndarray, md: _Reference, bins: int, rng: np.random.Generator
) -> dict[str, Any]:
    """Unweighted Ramachandran distances to MD with their MD floors, and the phi > 0 state vs MD's."""
    n_angles = _n_angles(phi, psi)
    p_raw, df_raw = _states(phi)
    kl_floor, tv_floor = ramachandran_floor(md.phi, md.psi, n_angles, bins, rng=rng)
    return dict(
        ramachandran_kl=_json_float(ramachandran_kl(md.phi, md.psi, phi, psi, bins)),
        ramachandran_tv=_json_float(ramachandran_tv(md.phi, md.psi, phi, psi, bins)),
        ramachandran_kl_floor=_json_float(kl_floor),
        ramachandran_tv_floor=_json_float(tv_floor),
        ramachandran_floor_note=None
        if math.isfinite(kl_floor) or n_angles == 0
        else (f"floor undefined: the model's {n_angles} samples are not fewer than the {len(md.phi)} MD frames"),
        p_phi_positive=_json_float(p_raw),
        p_phi_positive_error=_json_float(p_raw - md.p_phi_positive),
        dF_phi_kT=_json_float(df_raw),
        dF_phi_error_kT=_json_float(df_raw - md.dF_phi_kT),
    )


def _reweighted_metrics(
    u: np.ndarray,
    log_w: np.ndarray,
    phi: np.ndarray,
    psi: np.ndarray,
    md: _Reference,
    bins: int,
    n_boot: int,
    rng: np.random.Generator,
) -> dict[str, float | None]:
    """The `REWEIGHTED_KEYS`: the ESS with its bootstrap interval and the metrics under the weights."""
    weights = normalized_weights(log_w)
    ess = reverse_ess(log_w)
    low, high = reverse_ess_interval(log_w, n_boot, rng=rng)
    n_ess = round(ess * _n_angles(phi, psi)) if ess == ess else 0  # ess is nan without a finite weight
    kl_ess, tv_ess = ramachandran_floor(md.phi, md.psi, n_ess, bins, rng=rng)
    p_rw, df_rw = _states(phi, weights)
    values = dict(
        reverse_ess=ess,
        reverse_ess_ci_low=low,
        reverse_ess_ci_high=high,
        energy_shift_reweighted_kT=energy_shift(u, md.u_kT, weights),
        energy_w2_reweighted=energy_w2(md.u_kT, u, weights),
        ramachandran_kl_reweighted=ramachandran_kl(md.phi, md.psi, phi, psi, bins, weights=weights),
        ramachandran_tv_reweighted=ramachandran_tv(md.phi, md.psi, phi, psi, bins, weights=weights),
        ramachandran_kl_floor_ess=kl_ess,
        ramachandran_tv_floor_ess=tv_ess,
        p_phi_positive_reweighted=p_rw,
        p_phi_positive_reweighted_error=p_rw - md.p_phi_positive,
        dF_phi_reweighted_kT=df_rw,
        dF_phi_reweighted_error_kT=df_rw - md.dF_phi_kT,
    )
    return {k: _json_float(v) for k, v in values.items()}
