"""Figures of the analysis stage (paper figure 6); the training curves are in `bgp4.analysis.plots_training`.

Every function takes plain arrays, writes `<stem>.png` and `<stem>.pdf` and returns both paths.
Figures are built on `matplotlib.figure.Figure` objects (never pyplot), so nothing stays open and
no global figure state is touched; the shared style is applied through `rc_context` only while a
figure is drawn. Energies are in kT, angles in radians.
"""

from __future__ import annotations

import functools
import math
import textwrap
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.transforms import blended_transform_factory

from bgp4._io import atomic_write
from bgp4.analysis.estimators import angle_edges, ramachandran_histogram
from bgp4.errors import InputError

__all__ = [
    "STYLE",
    "FORMATS",
    "energy_violins",
    "ramachandran_panels",
    "free_energy_phi",
    "seed_panels",
]

#: rcParams shared by all figures (applied temporarily, see `_styled`).
STYLE: dict[str, Any] = {
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.linewidth": 1.3,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
    "pdf.fonttype": 42,  # TrueType in PDFs keeps text editable
    "image.cmap": "viridis",
}
#: Formats written for every figure.
FORMATS = ("png", "pdf")
#: Characters a line of a Ramachandran panel's title holds (9 pt titles on 2.4-inch panels).
TITLE_CHARS = 28
_PI_TICKS = (-np.pi, -np.pi / 2, 0.0, np.pi / 2, np.pi)
_PI_LABELS = ("$-\\pi$", "$-\\pi/2$", "0", "$\\pi/2$", "$\\pi$")


def _styled(func: Callable[..., list[Path]]) -> Callable[..., list[Path]]:
    """Run a figure function under the shared style, restoring the caller's rcParams after."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> list[Path]:
        with matplotlib.rc_context(STYLE):
            return func(*args, **kwargs)

    return wrapper


def _new_figure(
    n_panels: int, panel_size: tuple[float, float] = (3.2, 2.8), ncols: int | None = None, **subplots_kw: Any
) -> tuple[Figure, list[Any]]:
    """A Figure with `n_panels` axes on a grid (`ncols` per row, default all in one row);
    `subplots_kw` go to `Figure.subplots` (e.g. sharex=True)."""
    n_panels = max(1, int(n_panels))
    ncols = n_panels if ncols is None else max(1, min(int(ncols), n_panels))
    nrows = math.ceil(n_panels / ncols)
    fig = Figure(figsize=(panel_size[0] * ncols, panel_size[1] * nrows), layout="constrained")
    grid = fig.subplots(nrows, ncols, squeeze=False, **subplots_kw)
    axes = list(grid.ravel())
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig, axes[:n_panels]


def _save(fig: Figure, path: str | Path) -> list[Path]:
    """Write `fig` as PNG and PDF next to `path` (its .png/.pdf suffix, if any, is dropped)."""
    stem = Path(path)
    if stem.suffix.lower() in {f".{fmt}" for fmt in FORMATS}:
        stem = stem.with_suffix("")
    stem.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in FORMATS:
        target = stem.parent / f"{stem.name}.{fmt}"
        # A fixed creation date keeps PDFs byte-stable across runs with the same data; atomic: two
        # processes drawing one figure (a sweep's worker and its client) never leave half a file
        metadata = {"CreationDate": None} if fmt == "pdf" else None
        atomic_write(target, lambda tmp, fmt=fmt, metadata=metadata: fig.savefig(tmp, format=fmt, metadata=metadata))
        written.append(target)
    return written


def _color(index: int) -> str:
    """The index-th colour of the default cycle (MD data C0, noisy MD C1, models after)."""
    return f"C{index % 10}"


def _angle_axis(ax: Any, axis: str = "x") -> None:
    """Ticks at multiples of pi/2 on [-pi, pi] for the given axis ('x' or 'y')."""
    if axis == "x":
        ax.set_xlim(-np.pi, np.pi)
        ax.set_xticks(_PI_TICKS, _PI_LABELS)
    else:
        ax.set_ylim(-np.pi, np.pi)
        ax.set_yticks(_PI_TICKS, _PI_LABELS)


def _float_array(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).ravel()


# --------------------------------------------------------------------------- energy violins


def _auto_clip(columns: Mapping[str, np.ndarray]) -> tuple[float, float]:
    """Visible energy range: the first column (MD data) widened below by 25 % and above by 150 %
    of its span, so the noisy-data and model shifts show while rare huge energies do not
    flatten the plot."""
    arrays = [_float_array(v) for v in columns.values()]
    reference = arrays[0][np.isfinite(arrays[0])] if arrays else np.zeros(0)
    if reference.size == 0:
        reference = np.concatenate([a[np.isfinite(a)] for a in arrays]) if arrays else np.zeros(0)
    if reference.size == 0:
        return 0.0, 1.0
    low, high = float(reference.min()), float(reference.max())
    span = max(high - low, 1.0)
    return low - 0.25 * span, high + 1.5 * span


@_styled
def energy_violins(
    columns: Mapping[str, np.ndarray],
    low_fraction: Mapping[str, float | None],
    path: str | Path,
    clip: tuple[float, float] | None = None,
    threshold: float | None = None,
) -> list[Path]:
    """Violins of sample energies per column (paper figure 6, left).

    Args:
        columns: label -> (n,) energies in kT, in display order (MD data, MD + noise, models).
        low_fraction: label -> low-energy fraction (0..1) printed above the column.
        path: output stem; writes `<stem>.png` and `<stem>.pdf`.
        clip: visible (low, high) energy range in kT; default from the first column's range.
            Energies outside it (and non-finite ones) are left out of the violin and counted in
            the annotation instead.
        threshold: the low-energy threshold (kT), drawn as a dashed line if given.
    """
    if not columns:
        raise InputError("energy_violins needs at least one column of energies")
    low, high = _auto_clip(columns) if clip is None else (float(clip[0]), float(clip[1]))
    if not high > low:
        raise InputError(f"energy clip range must have low < high, got ({low}, {high})")
    fig, (ax,) = _new_figure(1, panel_size=(1.2 + 1.1 * len(columns), 3.6))
    label_at_top = blended_transform_factory(ax.transData, ax.transAxes)
    for i, (label, values) in enumerate(columns.items()):
        energies = _float_array(values)
        with np.errstate(invalid="ignore"):
            visible = energies[(energies >= low) & (energies <= high)]
        outside = energies.size - visible.size
        if np.unique(visible).size >= 2:
            parts = ax.violinplot([visible], positions=[i], widths=0.8, showmedians=True, showextrema=False)
            for body in parts["bodies"]:
                body.set_facecolor(_color(i))
                body.set_edgecolor("0.2")
                body.set_alpha(0.75)
            parts["cmedians"].set_color("0.1")
        elif visible.size:  # too few distinct values for a density estimate: show the points
            ax.plot(np.full(visible.size, i), visible, "o", color=_color(i), ms=3)
        fraction = low_fraction.get(label)
        lines = ["low-E n/a" if fraction is None or not np.isfinite(fraction) else f"low-E {fraction:.2%}"]
        if energies.size == 0:
            lines.append("no samples")
        elif outside:
            lines.append(f"{outside / energies.size:.1%} off-scale")
        ax.text(i, 1.01, "\n".join(lines), transform=label_at_top, ha="center", va="bottom", fontsize=7)
    if threshold is not None and np.isfinite(threshold):
        ax.axhline(threshold, color="0.4", ls="--", lw=0.8, label="max training energy")
        ax.legend(loc="lower right")
    ax.set_xticks(range(len(columns)), list(columns), rotation=20, ha="right")
    ax.set_xlim(-0.6, len(columns) - 0.4)
    ax.set_ylim(low, high)
    ax.set_ylabel(f"energy $u$ [$k_BT$] (shown {low:.0f} to {high:.0f})")
    return _save(fig, path)


# --------------------------------------------------------------------------- Ramachandran


@_styled
def ramachandran_panels(
    panels: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]], path: str | Path, bins: int = 64
) -> list[Path]:
    """Joint (phi, psi) densities, one panel per dataset (paper figure 6, right).

    Args:
        panels: label -> (phi (n,), psi (n,), linear non-negative weights (n,) or None), in
            display order (MD first, then each model, raw and reweighted).
        path: output stem; writes `<stem>.png` and `<stem>.pdf`.
        bins: histogram bins per axis on [-pi, pi].

    All panels share one logarithmic colour scale (density per rad^2) and one colorbar; empty
    bins are left blank.
    """
    if not panels:
        raise InputError("ramachandran_panels needs at least one dataset")
    densities = {label: ramachandran_histogram(phi, psi, bins, weights=w) for label, (phi, psi, w) in panels.items()}
    norm = _density_norm(densities.values())
    # at most 4 a row, rows filled evenly (5 panels: 3 + 2, not 4 + 1)
    rows = math.ceil(len(panels) / 4)
    fig, axes = _new_figure(len(panels), panel_size=(2.6, 2.6), ncols=math.ceil(len(panels) / rows))
    for ax, (label, (phi, _psi, _)) in zip(axes, panels.items()):
        _density_panel(ax, densities[label], norm, label, np.asarray(phi).size)
    _density_colorbar(fig, axes, norm)
    return _save(fig, path)


def _density_norm(densities: Iterable[np.ndarray]) -> LogNorm:
    """One logarithmic colour scale (density per rad^2) for Ramachandran histograms."""
    positive = np.concatenate([d[d > 0] for d in densities])
    vmax = float(positive.max()) if positive.size else 1.0
    # At least two decades (readable colorbar), at most six (well under one sample per bin for
    # any realistic sample size, so a stray huge weight cannot wash out the scale).
    vmin = min(max(float(positive.min()), vmax * 1e-6), vmax * 1e-2) if positive.size else 1e-3
    return LogNorm(vmin=vmin, vmax=vmax)


def _density_panel(ax: Any, density: np.ndarray, norm: LogNorm, label: str, n: int) -> None:
    """One Ramachandran panel: `density` (bins, bins) indexed [phi bin, psi bin] on [-pi, pi]^2,
    titled with `label` and the sample count `n`; empty bins blank."""
    edges = angle_edges(density.shape[0])
    # pcolormesh wants rows = y (psi); the histogram is indexed [phi, psi].
    ax.pcolormesh(edges, edges, np.ma.masked_less_equal(density.T, 0.0), norm=norm, rasterized=True)
    # long run names wrap (at spaces and hyphens): side-by-side panels' titles must not run into each other
    title = textwrap.fill(label, TITLE_CHARS)
    ax.set_title(f"{title}\n(n = {n:,})" if density.any() else f"{title}\n(no samples)")
    _angle_axis(ax, "x")
    _angle_axis(ax, "y")
    ax.set_aspect("equal")
    ax.spines[["top", "right"]].set_visible(True)  # a map reads better boxed
    ax.set_xlabel("$\\varphi$")
    ax.set_ylabel("$\\psi$")


def _density_colorbar(fig: Figure, axes: list[Any], norm: LogNorm) -> None:
    fig.colorbar(
        ScalarMappable(norm=norm, cmap=STYLE["image.cmap"]), ax=axes, label="density [rad$^{-2}$]", shrink=0.85
    )


# --------------------------------------------------------------------------- free energy


@_styled
def free_energy_phi(curves: Mapping[str, tuple[np.ndarray, np.ndarray]], path: str | Path) -> list[Path]:
    """Free energy along phi, one line per dataset.

    Args:
        curves: label -> (bin centers (bins,) rad, F (bins,) kT), e.g. from
            `analysis.free_energy_1d`; the first curve is the reference (MD, drawn black).
            A label "<name> reweighted" is drawn dashed in the colour of "<name>".
        path: output stem; writes `<stem>.png` and `<stem>.pdf`.
    """
    if not curves:
        raise InputError("free_energy_phi needs at least one curve")
    fig, (ax,) = _new_figure(1, panel_size=(4.6, 3.2))
    colours: dict[str, str] = {}
    for i, (label, (centers, free)) in enumerate(curves.items()):
        x = _float_array(centers)
        y = _float_array(free)
        y = np.where(np.isfinite(y), y, np.nan)  # empty bins become gaps
        if x.size != y.size:
            raise InputError(f"curve {label!r}: {x.size} centers but {y.size} free energies")
        reweighted = label.endswith(" reweighted")
        base = label[: -len(" reweighted")] if reweighted else label
        if i == 0:
            colours[base] = "black"
        colours.setdefault(base, _color(len(colours)))
        ax.plot(x, y, color=colours[base], ls="--" if reweighted else "-", lw=2.0 if i == 0 else 1.3, label=label)
    _angle_axis(ax, "x")
    ax.set_xlabel("$\\varphi$")
    ax.set_ylabel("free energy $F(\\varphi)$ [$k_BT$]")
    ax.legend(loc="best")
    return _save(fig, path)


@_styled
def seed_panels(models: list[str], summary: Mapping[str, Any], path: str | Path) -> list[Path]:
    """One panel per metric of a sweep: each seed a dot, the mean with its interval as a bar.

    Args:
        models: the sweep's models, in the order of the panels' columns.
        summary: metric -> {"label", "models": {model: {"values": {seed: value}, "mean", "low",
            "high", "n"}}}, as `bgp4.report.aggregate.summarize_sweep` gives it (any unit per metric).
        path: output stem; writes `<stem>.png` and `<stem>.pdf`.
    """
    keys = [k for k, e in summary.items() if any(e["models"][m]["n"] for m in models)]
    ncols = min(4, max(1, len(keys)))
    fig, axes = _new_figure(max(1, len(keys)), panel_size=(2.4, 2.2), ncols=ncols)
    for ax, key in zip(axes, keys):
        entry = summary[key]
        for i, model in enumerate(models):
            e = entry["models"][model]
            values = [v for v in e["values"].values() if v is not None and math.isfinite(v)]
            offsets = np.linspace(-0.15, 0.15, len(values)) if len(values) > 1 else np.zeros(len(values))
            ax.plot(i + offsets, values, "o", color=_color(i + 2), alpha=0.6, ms=3.5)  # C0, C1: MD columns
            if e["mean"] is not None:
                err = None if e["low"] is None else [[e["mean"] - e["low"]], [e["high"] - e["mean"]]]
                ax.errorbar([i + 0.3], [e["mean"]], yerr=err, fmt="s", color="0.15", ms=4, capsize=3)
        ax.set_xticks(range(len(models)), models, rotation=20, ha="right")
        ax.set_xlim(-0.5, len(models) - 0.3)
        ax.set_title(entry["label"])
    return _save(fig, path)
