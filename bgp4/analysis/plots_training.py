"""Training curves (a run's training.png/.pdf) from its metrics-log rows.

Same conventions as `bgp4.analysis.plots` (whose style, figure grid and writer it uses): plain
rows in, `<stem>.png` and `<stem>.pdf` out; energies in kT, likelihoods and losses in nats.
Runs whose rows carry `flow_ess` (the objectives that sample the flow to train it: kl, fab) get
sampling panels too: the reverse ESS against the optimizer step and against the target energy
evaluations spent, the objective's loss and (fab) the replay buffer. Other runs (ml, mixed)
draw the likelihood, sample-energy and P4Inv panels only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bgp4.analysis import plots

__all__ = ["ENERGY_LINTHRESH", "training_curves"]

#: Sample energies (kT) within +-ENERGY_LINTHRESH are drawn on a linear scale, beyond on a log scale.
ENERGY_LINTHRESH = 10.0
_PANEL = (3.6, 2.8)  # inches
_COLUMNS = 3  # panels a row: runs without sampling panels have at most three, in one row
_Series = tuple[np.ndarray, np.ndarray]
#: Shares (0..1) of the ESS panel: record key, legend label, colour, line style.
_SHARES = (
    ("flow_ess", "ESS, flow samples", "C0", "-"),
    ("ais_ess", "ESS, AIS batch", "C1", "-"),
    ("ais_acceptance", "AIS acceptance", "C2", "--"),
    ("out_of_domain", "out of domain", "C3", "--"),
)
#: The likelihoods (nats) of the likelihood panel.
_LIKELIHOODS = ("train_nll", "buffer_nll", "test_nll")
#: Energy-phase losses (nats): record key, legend label, colour.
_LOSSES = (("reverse_kl", "reverse KL (up to log Z)", "C4"), ("fab_loss", "FAB loss", "C5"))


def _series(
    records: Sequence[Mapping[str, Any]],
    key: str,
    keep: Callable[[Mapping[str, Any]], bool] = lambda r: True,
    x: str = "step",
) -> _Series:
    """(x, values) of the rows where `key` and `x` hold finite numbers; a missing step is the row index."""
    xs, values = [], []
    for index, record in enumerate(records):
        if key not in record or not keep(record):
            continue
        try:
            value = float(record[key])
            at = float(record.get(x, index if x == "step" else None))
        except (TypeError, ValueError):
            continue
        if math.isfinite(value) and math.isfinite(at):
            xs.append(at)
            values.append(value)
    return np.asarray(xs), np.asarray(values)


def _running_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over `window` rows (shorter at the start), same length as `values`."""
    sums = np.cumsum(np.concatenate([[0.0], values]))
    index = np.arange(1, values.size + 1)
    start = np.maximum(index - window, 0)
    return (sums[index] - sums[start]) / (index - start)


def _robust_ylim(ax: Any, values: Iterable[np.ndarray]) -> None:
    """Limit y to [min, 98th percentile] (plus margin) so early spikes do not flatten the curve."""
    values = list(values)
    pooled = np.concatenate([v for v in values if v.size]) if any(v.size for v in values) else np.zeros(0)
    if pooled.size < 2:
        return
    low, high = float(pooled.min()), float(np.quantile(pooled, 0.98))
    margin = 0.05 * max(high - low, 1e-12)
    ax.set_ylim(low - margin, high + margin)


def _plot_noisy(ax: Any, steps: np.ndarray, values: np.ndarray, color: str, label: str) -> None:
    """Raw values faintly, a running mean on top (window ~1 % of the run)."""
    ax.plot(steps, values, color=color, alpha=0.25, lw=0.6)
    ax.plot(steps, _running_mean(values, max(1, values.size // 100)), color=color, label=label)


@plots._styled
def training_curves(records: Sequence[Mapping[str, Any]], path: str | Path) -> list[Path]:
    """Training curves from metrics-log rows.

    Args:
        records: dicts with any of: step, phase ("ml" / "energy"), train_nll, test_nll,
            energy (mean sample energy, kT), energy_median_kT, energy_q10_kT, energy_q90_kT
            (sample-energy quantiles, kT), p4inv_residual; and, for objectives that sample the
            flow: flow_ess (reverse ESS of the flow's own samples, 0..1), ais_ess (ESS of the AIS
            batch), ais_acceptance, out_of_domain (shares, 0..1), energy_evaluations (target
            energy evaluations so far), reverse_kl, fab_loss (nats), buffer_nll (mean NLL of
            replay-buffer samples, nats), buffer_size (samples), log_weight_adjust (mean log
            weight change of the drawn buffer samples). Missing, None or non-numeric entries
            are skipped.
        path: output stem; writes `<stem>.png` and `<stem>.pdf`.

    Panels: negative log-likelihood (train per phase and the replay buffer's, test as markers),
    then sample energy and the P4Inv inverse residual (log scale) when the records hold them.
    The energy panel shows the median with a 10-90 % band where the records hold quantiles (else
    the mean) on a symlog axis (linear within +-10 kT), so a rare 1e5 kT sample cannot flatten
    it. Rows with flow_ess add: the ESS and shares against the step, the ESS against the energy
    evaluations, the energy-phase loss and the replay buffer (each when its keys are there), at
    most three panels a row; their likelihood panel is left out when it would be empty (no MD
    data, no buffer). A dotted line marks the start of the energy phase.
    """
    energy, band, energy_label = _energy_series(records)
    residual = _series(records, "p4inv_residual")
    residual = (residual[0][residual[1] > 0], residual[1][residual[1] > 0])  # a log axis
    draw: dict[str, Callable[[Any], None]] = {
        "nll": lambda ax: _nll_panel(ax, records),
        "energy": lambda ax: _energy_panel(ax, energy, band, energy_label),
        "residual": lambda ax: _residual_panel(ax, residual),
        "ess": lambda ax: _ess_panel(ax, records),
        "evaluations": lambda ax: _evaluations_panel(ax, records),
        "loss": lambda ax: _loss_panel(ax, records),
        "buffer": lambda ax: _buffer_panel(ax, records),
    }
    names = _panel_names(records, energy, residual)
    if "ess" not in names:  # no sampling panels: at most three, in one row, as ever
        fig, axes = plots._new_figure(len(names), panel_size=_PANEL, ncols=_COLUMNS, sharex=True)
    else:  # the step panels share their axis (every one keeps its tick labels), evaluations not
        fig, axes = plots._new_figure(len(names), panel_size=_PANEL, ncols=_COLUMNS)
        by_step = [ax for ax, name in zip(axes, names) if name != "evaluations"]
        for ax in by_step[1:]:
            ax.sharex(by_step[0])
    energy_start = _series(records, "step", _in_phase("energy"))[1]
    for ax, name in zip(axes, names):
        draw[name](ax)
        if name == "evaluations":
            continue
        ax.set_xlabel("optimizer step")
        if energy_start.size:
            ax.axvline(energy_start.min(), color="0.5", ls=":", lw=0.8)
    return plots._save(fig, path)


def _panel_names(records: Sequence[Mapping[str, Any]], energy: _Series, residual: _Series) -> list[str]:
    """The panels the records fill, in display order (the likelihood panel always)."""
    names = ["nll"] + [name for name, series in (("energy", energy), ("residual", residual)) if series[1].size]
    if not _series(records, "flow_ess")[1].size:
        return names  # no sampling quantities: the panels of the ml and mixed objectives
    if not any(_series(records, key)[1].size for key in _LIKELIHOODS):
        names.remove("nll")  # a run without MD data or replay buffer: no likelihood to show
    names.append("ess")
    if _series(records, "flow_ess", x="energy_evaluations")[1].size:
        names.append("evaluations")
    if any(_series(records, key)[1].size for key, _, _ in _LOSSES):
        names.append("loss")
    if _series(records, "buffer_size")[1].size:
        names.append("buffer")
    return names


def _in_phase(name: str) -> Callable[[Mapping[str, Any]], bool]:
    """Keeps the metrics-log rows of one training phase ("ml" / "energy"; rows without one are "ml")."""
    return lambda record: record.get("phase", "ml") == name


def _energy_series(records: Sequence[Mapping[str, Any]]) -> tuple[_Series, list[_Series] | None, str]:
    """The sample energy to draw (kT), its 10-90 % band (None without quantiles) and its label."""
    energy = _series(records, "energy_median_kT")
    if not energy[1].size:  # records without quantiles
        return _series(records, "energy"), None, "mean sample energy"
    band = [_series(records, key) for key in ("energy_q10_kT", "energy_q90_kT")]
    return energy, band, "median sample energy"


def _nll_panel(ax: Any, records: Sequence[Mapping[str, Any]]) -> None:
    """Training NLL per phase (noisy, with a running mean), FAB's replay-buffer NLL, and the test NLL
    as markers."""
    nll_ml = _series(records, "train_nll", _in_phase("ml"))
    nll_energy = _series(records, "train_nll", _in_phase("energy"))
    nll_buffer = _series(records, "buffer_nll")
    nll_test = _series(records, "test_nll")
    for (steps, values), colour, label in ((nll_ml, "C0", "train (ML)"), (nll_energy, "C3", "train (ML + energy)")):
        if values.size:
            _plot_noisy(ax, steps, values, colour, label)
    if nll_buffer[1].size:  # one row per logged interval: not noisy
        ax.plot(*nll_buffer, ".-", color="C5", ms=3, label="replay buffer (FAB)")
    if nll_test[1].size:
        ax.plot(*nll_test, "o", color="C1", ms=3, label="test")
    _robust_ylim(ax, [nll_ml[1], nll_energy[1], nll_buffer[1], nll_test[1]])
    ax.set_ylabel("negative log-likelihood")
    if ax.lines:
        ax.legend(loc="upper right")
    else:
        ax.text(0.5, 0.5, "no likelihood records", transform=ax.transAxes, ha="center", va="center")


def _energy_panel(ax: Any, energy: _Series, band: list[_Series] | None, label: str) -> None:
    """Sample energy on a symlog axis (linear within +-ENERGY_LINTHRESH kT), with its band if complete."""
    if band is not None and band[0][1].size == band[1][1].size == energy[1].size:
        ax.fill_between(energy[0], band[0][1], band[1][1], color="C2", alpha=0.2, lw=0, label="10-90 %")
    _plot_noisy(ax, *energy, "C2", label)
    ax.set_yscale("symlog", linthresh=ENERGY_LINTHRESH)
    ax.set_ylabel("sample energy [$k_BT$]")
    ax.legend(loc="upper right")


def _residual_panel(ax: Any, residual: _Series) -> None:
    """P4Inv's inverse residual (positive values) on a log axis."""
    ax.plot(*residual, ".-", color="C4", ms=3)
    ax.set_yscale("log")
    ax.set_ylabel("P4Inv inverse residual")


def _share_axis(ax: Any, label: str) -> None:
    """A y axis for shares (0..1), with a legend."""
    ax.set_ylim(-0.03, 1.03)
    ax.set_ylabel(label)
    ax.legend(loc="best")


def _ess_panel(ax: Any, records: Sequence[Mapping[str, Any]]) -> None:
    """The reverse ESS (Kish, 0..1) of the flow's own samples and of the AIS batch, with the AIS
    acceptance and the out-of-domain share, against the step (one row per logged interval)."""
    for key, label, colour, style in _SHARES:
        steps, values = _series(records, key)
        if values.size:
            ax.plot(steps, values, ".", ls=style, color=colour, ms=3, label=label)
    _share_axis(ax, "reverse ESS / share")


def _evaluations_panel(ax: Any, records: Sequence[Mapping[str, Any]]) -> None:
    """The reverse ESS against the target energy evaluations spent so far (what runs are compared at)."""
    for key, label, colour, _ in _SHARES[:2]:
        evaluations, values = _series(records, key, x="energy_evaluations")
        if values.size:
            ax.plot(evaluations, values, ".-", color=colour, ms=3, label=label)
    ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 3))
    ax.set_xlabel("target energy evaluations")
    _share_axis(ax, "reverse ESS")


def _loss_panel(ax: Any, records: Sequence[Mapping[str, Any]]) -> None:
    """The energy-phase objective's loss (nats): reverse KL (kl) or FAB's weighted NLL (fab)."""
    shown = []
    for key, label, colour in _LOSSES:
        steps, values = _series(records, key, _in_phase("energy"))
        if values.size:
            ax.plot(steps, values, ".-", color=colour, ms=3, label=label)
            shown.append(values)
    _robust_ylim(ax, shown)
    ax.set_ylabel("energy-phase loss [nats]")
    if ax.lines:
        ax.legend(loc="upper right")


def _buffer_panel(ax: Any, records: Sequence[Mapping[str, Any]]) -> None:
    """FAB's replay buffer: its size and (right axis) the mean log weight change of the drawn samples."""
    ax.plot(*_series(records, "buffer_size"), ".-", color="C6", ms=3)
    ax.set_ylabel("replay buffer [samples]", color="C6")
    adjust = _series(records, "log_weight_adjust")
    if adjust[1].size:
        right = ax.twinx()
        right.spines["right"].set_visible(True)
        right.plot(*adjust, ".--", color="C7", ms=3)
        right.set_ylabel("mean log weight adjustment", color="C7")
