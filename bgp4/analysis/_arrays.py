"""Input checks shared by the metric modules: 1-d float arrays, equal lengths, JSON floats."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bgp4.errors import InputError

__all__ = ["_as_1d", "_json_float", "_same_length"]


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
