"""Torsion maps of the mixed coordinate transform: where a torsion's branch cut goes, whether it
goes around the circle, and the logit map of the paper's kinds.

Torsions in rad; the logit map takes a torsion in (cut, cut + 2 pi) to the real line.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "CIRCULAR_BINS",
    "CIRCULAR_MIN_DENSITY",
    "TORSION_MODES",
    "TORSION_REACH",
    "TORSION_REACH_QUANTILE",
    "TWO_PI",
]

_F64 = torch.float64
TWO_PI = 2.0 * math.pi
_LOGIT_EPS = 1e-12  # torsions exactly at the cut would map to -inf
TORSION_MODES = ("logit", "circular")
#: A torsion is circular when every 5-degree bin of the training data holds at least this share
#: of the uniform density (at 600 K: the three methyl rotors and psi; phi has an empty range).
CIRCULAR_BINS, CIRCULAR_MIN_DENSITY = 72, 0.01
#: A narrow torsion of the spline kinds is standardized so that all but the outermost
#: 1 - TORSION_REACH_QUANTILE of the training frames lie within +-TORSION_REACH. A rare basin
#: far from the mean (phi > 0 of a peptide's inner residues at 300 K lies 5-6 standard deviations
#: out) would otherwise fall beyond the spline couplings' domain (+-`splines.SPLINE_BOUND`), in
#: their identity tails, where no layer can give it mass. A unimodal torsion (0.999 quantile about 3.3) keeps its std.
TORSION_REACH, TORSION_REACH_QUANTILE = 4.0, 0.999


def _torsion_logit(t: torch.Tensor, cut: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Torsions (rad) -> logit of their position in (cut, cut + 2 pi), and log|dt/du| (B,)."""
    s = (torch.remainder(t - cut, TWO_PI) / TWO_PI).clamp(_LOGIT_EPS, 1.0 - _LOGIT_EPS)
    return s.log() - (-s).log1p(), (math.log(TWO_PI) + s.log() + (-s).log1p()).sum(1)


def _torsion_from_logit(u: torch.Tensor, cut: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of `_torsion_logit`: torsions in (cut, cut + 2 pi) and log|dt/du| (B,)."""
    logsig = torch.nn.functional.logsigmoid
    return cut + TWO_PI * torch.sigmoid(u), (math.log(TWO_PI) + logsig(u) + logsig(-u)).sum(1)


def _bin_counts(torsions: torch.Tensor, bins: int) -> torch.Tensor:
    """(bins, m) counts per column of (n, m) torsions in (-pi, pi] over equal bins of the circle."""
    which = torch.floor((torsions + math.pi) / (TWO_PI / bins)).long().clamp_(0, bins - 1)
    counts = torch.zeros(bins, torsions.shape[1], dtype=_F64)
    return counts.scatter_add_(0, which, torch.ones_like(torsions))


def _sparsest_cut(torsions: torch.Tensor, bins: int) -> torch.Tensor:
    """Per column of (n, m) torsions in (-pi, pi]: centre of the least populated histogram bin.

    Counts are smoothed over neighbouring bins (circularly) so the cut lands inside a gap.
    """
    counts = _bin_counts(torsions, bins)
    smooth = counts + 0.5 * (counts.roll(1, 0) + counts.roll(-1, 0))
    return -math.pi + (TWO_PI / bins) * (smooth.argmin(0).to(_F64) + 0.5)


def _narrow_scale(u: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """(m,) standardizing scale (rad) per column of (n, m) torsion coordinates: their std, widened
    where more than 1 - TORSION_REACH_QUANTILE of the frames lie beyond TORSION_REACH stds."""
    k = max(1, min(u.shape[0], math.ceil(TORSION_REACH_QUANTILE * u.shape[0])))
    reach = (u - mean).abs().kthvalue(k, dim=0).values  # torch.quantile refuses large inputs
    return torch.maximum(std, reach / TORSION_REACH)


def _goes_around(torsions: torch.Tensor) -> torch.Tensor:
    """(m,) bool per column of (n, m) torsions: every one of CIRCULAR_BINS bins is populated."""
    counts = _bin_counts(torsions, CIRCULAR_BINS)
    return counts.min(0).values >= CIRCULAR_MIN_DENSITY * torsions.shape[0] / CIRCULAR_BINS
