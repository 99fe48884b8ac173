"""Where the numbers run: the OpenMM platform for a small molecule, and the torch device.

For 22 atoms the Reference platform (plain double precision, no thread pool) is the fastest
on CPU: about 15,000 steps/s per core here against 500-4,000 for the CPU platform, whose
worker thread is slow to wake on these virtual machines. A GPU context is dominated by
launch latency at this size, so `auto` picks Reference unless asked otherwise. Reference grows
with the square of the atom count: above about 150 atoms the CPU platform steps faster
(`run/bench/bench_platform_size.py`; docs/guide/simulate.md, "Platforms").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import openmm

from bgp4.errors import InputError

if TYPE_CHECKING:
    import torch

__all__ = ["PLATFORM_CHOICES", "available_platforms", "get_platform", "resolve_device", "resolve_platform"]

PLATFORM_CHOICES = ("auto", "Reference", "CPU", "CUDA", "OpenCL")


def available_platforms() -> list[str]:
    return [openmm.Platform.getPlatform(i).getName() for i in range(openmm.Platform.getNumPlatforms())]


def resolve_platform(name: str = "auto") -> str:
    """Canonical platform name for `name` (case-insensitive); raises InputError if unknown or absent."""
    lookup = {p.lower(): p for p in PLATFORM_CHOICES}
    canonical = lookup.get(str(name).lower())
    if canonical is None:
        raise InputError(f"unknown platform {name!r}; choose one of {', '.join(PLATFORM_CHOICES)}")
    if canonical == "auto":
        return "Reference"
    if canonical not in available_platforms():
        raise InputError(
            f"OpenMM platform {canonical!r} is not available here (have: {', '.join(available_platforms())})"
        )
    return canonical


def get_platform(name: str = "auto") -> tuple[openmm.Platform, dict[str, str]]:
    """The OpenMM platform object and its properties (one thread for CPU: one context per core)."""
    canonical = resolve_platform(name)
    props = {"Threads": "1"} if canonical == "CPU" else {}
    return openmm.Platform.getPlatformByName(canonical), props


def resolve_device(name: str) -> torch.device:
    """torch device for `name`: `auto` -> CUDA when torch sees a GPU, else CPU; raises InputError
    for CUDA without a GPU, or a name torch does not know."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"device {name!r} (--device) asks for CUDA, but torch sees no GPU")
    try:
        return torch.device(name)
    except RuntimeError:
        raise InputError(f"unknown device {name!r}; use auto, cpu or cuda") from None
