"""The Ramachandran grid: bins per axis of the (phi, psi) histograms and the check of a grid.

A leaf without numpy or mdtraj, so that the CLI can check `--rama-bins` at its start.

>>> check_rama_bins(TABLE_RAMA_BINS)
100
"""

from __future__ import annotations

import json
from pathlib import Path

from bgp4.errors import InputError

__all__ = ["MAX_RAMA_BINS", "N_BINS", "TABLE_RAMA_BINS", "check_rama_bins", "grid_label", "report_grid"]

#: Default number of bins per axis for Ramachandran histograms and free-energy profiles.
N_BINS = 64
#: The grid of the field's table: TA-BG's evaluation code histograms its Ramachandran KL on 100 x 100.
TABLE_RAMA_BINS = 100
#: The finest Ramachandran grid `bgp4 analyze` takes (a million bins; finer ones leave most empty).
MAX_RAMA_BINS = 1000


def check_rama_bins(bins: int) -> int:
    """`bins` per axis of a Ramachandran grid as an int; InputError unless 2 <= bins <= MAX_RAMA_BINS."""
    if not float(bins).is_integer() or not 2 <= int(bins) <= MAX_RAMA_BINS:
        raise InputError(f"rama_bins (--rama-bins) takes 2 to {MAX_RAMA_BINS} bins per axis, got {bins}")
    return int(bins)


def grid_label(bins: int = N_BINS) -> str:
    """The grid as a report names it: "64 x 64"."""
    return f"{int(bins)} x {int(bins)}"


def report_grid(report: str | Path) -> int | None:
    """The Ramachandran grid of a report directory's metrics.json (N_BINS for a report from before
    the grid was recorded); None without one."""
    path = Path(report) / "metrics.json"
    return int(json.loads(path.read_text()).get("ramachandran_bins", N_BINS)) if path.exists() else None
