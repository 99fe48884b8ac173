"""Evaluating a large batch a slice of rows at a time, in bounded memory.

A spline flow's intermediates for 10,000 alanine-dipeptide samples take about 1 GiB at once, and
the C allocator keeps much of it between calls: AIS refinement at `--batch 10000` peaked at 4.6
GiB, against 1.2 GiB in slices of 2,048, and ran no slower (run/bench/bench_memory.py,
run/results/refine-memory). Samples are evaluated independently of each other, so slices give the
values of the whole batch, to float rounding (matrix products may round differently with the
number of rows). Only the flow's intermediates are bounded: what the caller keeps per sample
(chains, positions, forces) still grows with the batch.

>>> import torch
>>> by_rows(lambda z: z.sum(1), torch.ones(5000, 3), rows=2048).shape
torch.Size([5000])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

__all__ = ["ROWS", "by_rows"]

ROWS = 2048  # samples per slice: a flow evaluation's peak memory grows with it, its speed does not
T = TypeVar("T")


def by_rows(fn: Callable[[torch.Tensor], T], z: torch.Tensor, rows: int | None = None) -> T:
    """fn(z) for z (B, ...), computed `rows` rows (default `ROWS`) at a time and joined along the
    first dimension.

    fn must treat rows independently and return a tensor, or a (named) tuple or dict of tensors,
    Nones or dicts of tensors (a `GeneratorSample`, an `Evaluation`).
    """
    rows = ROWS if rows is None else rows
    if rows < 1:
        raise ValueError(f"rows must be at least 1, got {rows}")
    if len(z) <= rows:
        return fn(z)
    return _join([fn(part) for part in z.split(rows)])


def _join(parts: list[Any]) -> Any:
    """The slices' results joined along rows; every slice must give the same structure."""
    first = parts[0]
    if any((p is None) != (first is None) for p in parts):
        raise TypeError("by_rows cannot join None with values: every slice must give the same structure")
    if first is None:
        return None
    if isinstance(first, torch.Tensor):
        return torch.cat(parts)
    if isinstance(first, dict):
        return {key: _join([p[key] for p in parts]) for key in first}
    if isinstance(first, tuple):
        fields = [_join(list(column)) for column in zip(*parts)]
        return type(first)(*fields) if hasattr(first, "_fields") else tuple(fields)
    raise TypeError(f"by_rows cannot join results of type {type(first).__name__}")
