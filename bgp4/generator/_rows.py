"""Evaluating a large batch a slice of rows at a time, in bounded memory.

A spline flow's intermediates for 10,000 alanine-dipeptide samples take about 1 GiB at once, and
the C allocator keeps much of it after each call: refining at `--batch 10000` grew a process to
5 GiB, a sweep worker that had trained first to 6.5 GiB (run/bench/bench_memory.py). Samples
are evaluated independently of each other, so slices give the same values (to float rounding)
and are no slower: 1.49-1.53 s against 1.66 s for 10,000 samples on one core in slices of 1,024
to 2,048.

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
    if len(z) <= rows:
        return fn(z)
    return _join([fn(part) for part in z.split(rows)])


def _join(parts: list[Any]) -> Any:
    first = parts[0]
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
