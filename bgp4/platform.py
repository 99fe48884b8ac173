"""Where the numbers run: the OpenMM platform for a molecule's size, and the torch device.

For 22 atoms the Reference platform (plain double precision, no thread pool) is the fastest
on CPU: about 15,000 steps/s per core here against 500-4,000 for the CPU platform, whose
worker thread is slow to wake on these virtual machines. A GPU context is dominated by
launch latency at this size. Reference grows with the square of the atom count: above about
150 atoms the CPU platform (one thread) steps faster (`run/bench/bench_platform_size.py`;
docs/guide/simulate.md, "Platforms"). Reference also evaluates custom forces through OpenMM's
expression interpreter: the CustomGBForce of the OBC1 and OBC2 implicit-solvent files
(`--forcefield amber96`, `amber14`) runs alanine dipeptide at about 510-530 steps/s there,
against about 3,000-4,200 on the CPU platform and 16,800-20,700 for amber99sb-ildn's GBSAOBCForce
on Reference. So `auto` is Reference up to `AUTO_CPU_ATOMS` atoms without custom forces, and CPU
otherwise: chosen by the molecule and its system alone, never by the machine, so that one command
gives the same numbers everywhere (both platforms ship with every OpenMM build).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import openmm

from bgp4.errors import InputError

if TYPE_CHECKING:
    import torch

__all__ = [
    "AUTO_CPU_ATOMS",
    "PLATFORM_CHOICES",
    "available_platforms",
    "get_platform",
    "resolve_device",
    "resolve_platform",
    "slow_on_reference",
]

PLATFORM_CHOICES = ("auto", "Reference", "CPU", "CUDA", "OpenCL")
AUTO_CPU_ATOMS = 150  # `auto` is CPU above this many atoms: where it overtakes Reference on one core


def available_platforms() -> list[str]:
    """The names of the OpenMM platforms this installation can use (e.g. Reference, CPU, CUDA)."""
    return [openmm.Platform.getPlatform(i).getName() for i in range(openmm.Platform.getNumPlatforms())]


def slow_on_reference(system: openmm.System) -> bool:
    """Whether `system` has a custom force (any `Custom*Force`), which the Reference platform
    evaluates through OpenMM's expression interpreter, 30-40x slower than its built-in forces."""
    return any(type(force).__name__.startswith("Custom") for force in system.getForces())


def resolve_platform(name: str = "auto", n_atoms: int | None = None, custom: bool = False) -> str:
    """Canonical platform name for `name` (case-insensitive); raises InputError if unknown or absent.

    `auto` is Reference for a system of up to `AUTO_CPU_ATOMS` atoms (or when `n_atoms` is not
    given) without custom forces (`custom`: `slow_on_reference` of the system), and CPU otherwise.
    """
    lookup = {p.lower(): p for p in PLATFORM_CHOICES}
    canonical = lookup.get(str(name).lower())
    if canonical is None:
        raise InputError(f"unknown platform {name!r}; choose one of {', '.join(PLATFORM_CHOICES)}")
    if canonical == "auto":
        return "CPU" if custom or (n_atoms is not None and n_atoms > AUTO_CPU_ATOMS) else "Reference"
    if canonical not in available_platforms():
        raise InputError(
            f"OpenMM platform {canonical!r} is not available here (have: {', '.join(available_platforms())})"
        )
    return canonical


def get_platform(
    name: str = "auto", n_atoms: int | None = None, custom: bool = False
) -> tuple[openmm.Platform, dict[str, str]]:
    """The OpenMM platform object and its properties (one thread for CPU: one context per core);
    `n_atoms` and `custom` as for `resolve_platform`."""
    canonical = resolve_platform(name, n_atoms, custom)
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
        raise InputError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
