"""Choosing an OpenMM platform for a small molecule.

For 22 atoms the Reference platform (plain double precision, no thread pool) is the fastest
on CPU: about 15,000 steps/s per core here against 500-4,000 for the CPU platform, whose
worker thread is slow to wake on these virtual machines. A GPU context is dominated by
launch latency at this size, so `auto` picks Reference unless asked otherwise.
"""
from __future__ import annotations

import openmm

from bgp4.errors import InputError

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
        raise InputError(f"OpenMM platform {canonical!r} is not available here (have: {', '.join(available_platforms())})")
    return canonical


def get_platform(name: str = "auto") -> tuple[openmm.Platform, dict[str, str]]:
    """The OpenMM platform object and its properties (one thread for CPU: one context per core)."""
    canonical = resolve_platform(name)
    props = {"Threads": "1"} if canonical == "CPU" else {}
    return openmm.Platform.getPlatformByName(canonical), props
