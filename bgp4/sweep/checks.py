"""The checks of a sweep's input, before anything runs: models and counts, the objective axis,
and the data file (an existing one as `bgp4 train` takes it, or the MD settings that will make it)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from bgp4.errors import InputError
from bgp4.settings import MODELS, OBJECTIVES
from bgp4.simulation.data import data_settings, frame_count, resolve_temperature
from bgp4.simulation.md import MDSettings

__all__ = ["check_sweep", "objective_axis", "data_md_settings", "data_frames", "run_device"]


def objective_axis(objectives: list[str] | None) -> tuple[str, ...]:
    """The objectives a sweep compares (two or more), or () when it compares none; InputError for
    an unknown or repeated one."""
    objectives = list(objectives or [])
    unknown = [o for o in objectives if o not in OBJECTIVES]
    if unknown:
        known = ", ".join(OBJECTIVES)
        raise InputError(f"unknown objective(s) {', '.join(unknown)} (--objectives); choose from {known}")
    if len(set(objectives)) != len(objectives):
        raise InputError(f"objectives (--objectives) lists an objective twice: {','.join(objectives)}")
    return tuple(objectives) if len(objectives) > 1 else ()


def check_sweep(models: list[str], n_seeds: int, threads_per_run: int, gpus_per_run: float) -> None:
    """Refuse (InputError) models and counts a sweep cannot run."""
    if not models:
        raise InputError("models (--models) needs at least one model")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise InputError(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    if len(set(models)) != len(models):
        raise InputError(f"models (--models) lists a model twice: {','.join(models)}")
    if n_seeds < 1:
        raise InputError(f"n_seeds (--seeds) must be at least 1, got {n_seeds}")
    if threads_per_run < 1:
        raise InputError(f"threads_per_run (--threads-per-run) must be at least 1, got {threads_per_run}")
    if gpus_per_run < 0:
        raise InputError(f"gpus_per_run (--gpus-per-run) must be >= 0, got {gpus_per_run}")


def data_md_settings(data: Path, md: dict[str, Any] | None, temperature: float | None) -> dict[str, Any] | None:
    """The MD settings (checked) when the data file must be simulated first; None for data that train takes."""
    if data.exists():
        resolve_temperature(data_settings(data).get("temperature"), temperature, data)
        return None
    settings = asdict(MDSettings(**(md or {})))
    MDSettings(**settings).resolved()  # bad MD settings fail here, before anything runs
    if temperature is not None and float(temperature) != float(settings["temperature"]):  # not after hours of MD
        raise InputError(
            f"{data} (--data) does not exist, and the sweep would simulate it at {settings['temperature']:g} K, "
            f"not the {float(temperature):g} K of --temperature: make it first with `bgp4 simulate`"
        )
    if data.suffix != ".h5":
        raise InputError(f"data (--data) must be an mdtraj HDF5 file ending in .h5, got {data}")
    return settings


def data_frames(data: Path, md_settings: dict[str, Any] | None) -> tuple[int, str]:
    """How many frames the data file has (read from its shape, not its frames) or the sweep's MD
    will write (`md_settings` from `data_md_settings`), and how to name them in a message."""
    if md_settings is None:
        return frame_count(data), str(data)
    return int(md_settings["frames"]), f"{data} (to be simulated, {md_settings['frames']} frames)"


def run_device(device: str, gpus_per_run: float) -> str:
    """The device of every run: "auto" follows the resource request, not whichever device a worker
    happens to see; InputError for cuda without GPUs per run."""
    if device == "auto":
        return "cuda" if gpus_per_run > 0 else "cpu"
    if device.startswith("cuda") and gpus_per_run <= 0:
        raise InputError(
            "device='cuda' (--device cuda) needs gpus_per_run > 0 (--gpus-per-run) so that runs are placed on "
            "GPU workers"
        )
    return device
