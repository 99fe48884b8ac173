"""Several data files of one target merged into one training file (`bgp4 merge`).

Independent runs of one molecule, system and temperature (replica exchanges with other seeds, plain
MD beside them) give more frames in the same wall time than one long run: on two cores, two runs at
once. Maximum likelihood wants those frames in one file:

    bgp4 simulate --out s4.h5 --temperature 300 --constraints none --replica-exchange 300:600:4 --seed 4
    bgp4 simulate --out s5.h5 --temperature 300 --constraints none --replica-exchange 300:600:4 --seed 5
    bgp4 merge x2.h5 s4.h5 s5.h5

or from Python, `merge("x2.h5", ["s4.h5", "s5.h5"])`. The frames (nm) and potential energies
(kJ/mol) are concatenated in the order given. The merged file is a plain bgp4 data file. Its
settings are the first input's without the keys that describe how one input's frames were made
(`PER_SOURCE_KEYS`: a merged frame has no single MD cost), plus `merged_from`, which records each
input's path, frames, method, ladder and MD energy evaluations. So `bgp4 analyze` counts the
merged file's MD as the sum of its sources'. The per-frame `replica` array numbers every input's
replicas apart, so that the block errors of `bgp4 analyze` stay within one time series. The other
per-frame arrays of MD files (`time`, `kineticEnergy`, `temperature`, `walker`) are not kept.

Inputs that sample different distributions make a file that is not an equilibrium sample. Plain
MD that has not crossed a barrier weights that basin low, for example. Train on such a file, and
analyze against an equilibrium one (`bgp4 analyze RUN --data REMD.h5`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from bgp4._io import check_output_file, check_output_name, temporary_path
from bgp4.errors import InputError
from bgp4.simulation.data import load_trajectory, md_data_settings, md_energy_evaluations, write_trajectory
from bgp4.simulation.molecule import check_same_molecule

__all__ = ["PER_SOURCE_KEYS", "merged_settings", "merge"]

#: Settings that describe how one input's frames were made; they do not hold for the merged file.
PER_SOURCE_KEYS = (
    "save_every",
    "frames",
    "iterations",
    "temperatures",
    "replica_exchange",
    "replicas",
    "replica_seeds",
    "exchange_acceptance",
    "exchange_attempts",
    "steps_per_iteration",
    "seed",
    "timestep_fs",
    "equilibration_ps",
    "sampler",
    "mixing",
    "move",
    "velocity_refresh",
    "openmmtools_version",
)


def _one_temperature(settings: list[dict[str, Any]]) -> None:
    temperatures = sorted({float(s["temperature"]) for s in settings})
    if len(temperatures) != 1:
        raise InputError(f"the inputs are at different temperatures ({temperatures} K): merge one target only")


def merged_settings(settings: list[dict[str, Any]], paths: list[Path], frames: list[int]) -> dict[str, Any]:
    """The first input's settings without `PER_SOURCE_KEYS`, with `method: merged`, the total
    `frames` and `merged_from` (one entry per input); InputError if the inputs were simulated at
    different temperatures (K)."""
    _one_temperature(settings)
    out = {k: v for k, v in settings[0].items() if k not in PER_SOURCE_KEYS}
    out["method"] = "merged"
    out["frames"] = int(sum(frames))
    out["merged_from"] = [
        {
            "path": str(p),
            "frames": int(n),
            "method": s.get("method", "md"),
            "ladder": s.get("replica_exchange", ""),
            "md_energy_evaluations": md_energy_evaluations(s, n),
        }
        for p, n, s in zip(paths, frames, settings, strict=True)
    ]
    return out


def _check_paths(out: Path, inputs: list[Path], overwrite: bool) -> None:
    check_output_name(out)
    if len(inputs) < 2:
        raise InputError(f"merge needs at least two input files, got {len(inputs)}")
    names = [os.path.realpath(p) for p in inputs]
    if len(set(names)) != len(names):
        raise InputError("an input file is given twice: its frames would count double")
    if {os.path.realpath(out), os.path.realpath(temporary_path(out))} & set(names):
        raise InputError(f"out={out} (or its temporary file) is one of the inputs: choose another name")
    if out.exists() and not overwrite:
        raise InputError(f"out={out} exists; use --overwrite to replace it")


def _replica_ids(data: list) -> np.ndarray:
    """Per frame, its replica numbered apart across inputs (input k's ids follow input k-1's)."""
    ids, offset = [], 0
    for d in data:
        own = d.extras.get("replica")
        own = np.zeros(d.n_frames, dtype=np.int64) if own is None else np.asarray(own, dtype=np.int64)
        if own.shape != (d.n_frames,):
            raise InputError(f"{d.source}: its replica array does not match its {d.n_frames} frames")
        ids.append(own + offset)
        offset = int(ids[-1].max()) + 1
    return np.concatenate(ids).astype(np.int16)


def merge(out: str | os.PathLike, inputs: list[str | os.PathLike], overwrite: bool = False) -> Path:
    """Write the frames of `inputs` (bgp4 data files of one molecule, system and temperature) to
    `out` as one data file (see the module doc); returns its path. Raises InputError, with nothing
    written, for fewer than two inputs, an input given twice, missing or not a `bgp4 simulate`
    output, `out` among the inputs, not a `.h5` path or (without `overwrite`) existing, and inputs of
    different molecules, systems or temperatures."""
    out, inputs = Path(out), [Path(p) for p in inputs]
    _check_paths(out, inputs, overwrite)
    _one_temperature([md_data_settings(p) for p in inputs])  # before reading any frames
    data = [load_trajectory(p, extras=("replica",)) for p in inputs]
    first = data[0].molecule()
    for other in data[1:]:
        check_same_molecule(first, other.molecule(), f"{data[0].source} and {other.source}")
    replica = _replica_ids(data)
    check_output_file(out)  # last: it creates the output's directory
    settings = merged_settings([d.settings for d in data], inputs, [d.n_frames for d in data])
    chunks = ({"coordinates": d.xyz, "potentialEnergy": d.energies.astype(np.float32)} for d in data)
    write_trajectory(out, data[0].topology, chunks, settings, extras={"replica": replica})
    return out
