"""Statistics over seeds: the mean with its Student-t interval, and paired differences.

>>> t_interval([1.0, 2.0, 3.0])["mean"]
2.0
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["LEVEL", "paired_difference", "t_interval"]

#: The confidence level of every interval over seeds.
LEVEL = 0.95


def _finite(values: list[float | None]) -> np.ndarray:
    array = np.array([v for v in values if v is not None], dtype=np.float64)
    return array[np.isfinite(array)]


def t_interval(values: list[float | None], level: float = LEVEL) -> dict[str, Any]:
    """Mean and Student-t interval of the finite values: {mean, low, high, n} (None where undefined)."""
    from scipy import stats

    x = _finite(values)
    n = int(x.size)
    if n == 0:
        return {"mean": None, "low": None, "high": None, "n": 0}
    mean = float(x.mean())
    if n < 2:
        return {"mean": mean, "low": None, "high": None, "n": n}
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * x.std(ddof=1) / math.sqrt(n))
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def paired_difference(
    values: list[float | None], reference: list[float | None], level: float = LEVEL
) -> dict[str, Any]:
    """`values - reference` over pairs where both are finite: t interval of the mean and paired t-test p."""
    from scipy import stats

    pairs = [
        (a, b)
        for a, b in zip(values, reference)
        if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)
    ]
    result = t_interval([a - b for a, b in pairs], level)
    result["p"] = None
    if len(pairs) >= 2:
        a, b = np.array(pairs, dtype=np.float64).T
        if np.any(a != b):
            p = float(stats.ttest_rel(a, b).pvalue)
            result["p"] = p if math.isfinite(p) else None
    return result
