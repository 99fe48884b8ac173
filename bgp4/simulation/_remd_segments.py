"""A replica-exchange run's work directory (see `bgp4.simulation.remd`): segments of openmmtools
storage, which of them are sealed, opening one, sealing one that a stop left at its last
checkpoint, and reading the lowest temperature's frames back.

A segment `segment-NNNN/` holds SEGMENT_INFO ({start, iterations}: global iterations start + 1 ..
start + iterations), openmmtools' analysis and checkpoint files, and DONE once sealed. Positions in
nm, energies in kJ/mol (reduced energies in kT of each temperature).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from bgp4._io import atomic_write
from bgp4.errors import Bgp4Error, first_line

__all__ = [
    "CHECKPOINT_ITERATIONS",
    "CHECKPOINT_STORAGE",
    "DONE",
    "SEGMENT",
    "SEGMENT_INFO",
    "SEGMENT_ITERATIONS",
    "STORAGE",
    "held",
    "path",
    "read_frames",
    "reporter",
    "seal_at_checkpoint",
    "sealed",
    "size",
]

CHECKPOINT_ITERATIONS = 10  # iterations between openmmtools checkpoints: what a kill loses at most
SEGMENT_ITERATIONS = 1000  # iterations of one storage (a multiple of CHECKPOINT_ITERATIONS)
STORAGE, CHECKPOINT_STORAGE = "remd.nc", "remd_checkpoint.nc"  # openmmtools' analysis and checkpoint files
SEGMENT = "segment-{:04d}"
SEGMENT_INFO, DONE = "segment.json", "done.json"


def path(work: Path, k: int) -> Path:
    """Segment k's directory."""
    return work / SEGMENT.format(k)


def sealed(work: Path) -> list[dict[str, int]]:
    """{start, iterations} of every sealed segment, in order; each must start where the ones
    before it end (segments differ in length: a stopped one is sealed early)."""
    found: list[dict[str, int]] = []
    while (path(work, len(found)) / DONE).exists():
        info = json.loads((path(work, len(found)) / SEGMENT_INFO).read_text())
        if info["start"] != held(found):
            raise Bgp4Error(
                f"{path(work, len(found))} starts at iteration {info['start']}, not {held(found)} where the segments "
                f"before it end; remove it and every later segment, then rerun to make them again"
            )
        found.append(info)
    return found


def size(left: int) -> int:
    """Iterations of a new segment when `left` are still to run: at most SEGMENT_ITERATIONS, and a
    multiple of CHECKPOINT_ITERATIONS, so that every sealed segment ends on a checkpoint from which
    a longer run (a larger --frames) can go on; the data file keeps only the frames asked for."""
    return min(SEGMENT_ITERATIONS, -(-left // CHECKPOINT_ITERATIONS) * CHECKPOINT_ITERATIONS)


def held(infos: list[dict[str, int]]) -> int:
    """Iterations the sealed segments hold (their `sealed` records)."""
    return sum(info["iterations"] for info in infos)


def reporter(directory: Path, n_atoms: int, mode: str | None = None):
    """openmmtools' storage of one segment: every atom's position at every iteration in the
    analysis file (velocities only at checkpoints), full checkpoints every CHECKPOINT_ITERATIONS;
    the MCMC moves only when they change (`SegmentReporter`)."""
    from bgp4.simulation._remd_storage import SegmentReporter

    return SegmentReporter(
        str(directory / STORAGE),
        open_mode=mode,
        checkpoint_interval=CHECKPOINT_ITERATIONS,
        checkpoint_storage=CHECKPOINT_STORAGE,
        analysis_particle_indices=range(n_atoms),
        position_interval=1,
        velocity_interval=0,
    )


def seal_at_checkpoint(directory: Path, n_atoms: int) -> int:
    """Seal a segment that a stop or a kill left unsealed at its last checkpoint, reading it only
    (its frames up to there are read back first); the iterations it then holds, or 0 when it holds
    no checkpoint past its start, or does not read back (with a line on stderr)."""
    import netCDF4

    try:
        for name in (STORAGE, CHECKPOINT_STORAGE):  # fails at once, where openmmtools retries for 8 s
            netCDF4.Dataset(str(directory / name), "r").close()
        storage = reporter(directory, n_atoms, mode="r")
        try:
            last = int(storage.read_last_iteration(last_checkpoint=True))
            if last > 0 and storage.read_sampler_states(last) is None:  # the next segment starts here
                raise ValueError(f"no checkpoint at iteration {last}")
        finally:
            storage.close()
        if last > 0:  # frames, energies, temperatures and exchanges up to the checkpoint
            read_frames(directory, {"iterations": last}, last, n_atoms, 1.0)
    except Exception as exc:  # noqa: BLE001 - any failure to read the storage means: damaged by a kill
        # the message too: a bug shows apart from kill damage
        print(f"{directory} does not open ({first_line(exc, 160, typed=True)}); making it again", file=sys.stderr)
        return 0
    if last > 0:
        info = json.loads((directory / SEGMENT_INFO).read_text())
        atomic_write(directory / SEGMENT_INFO, json.dumps({**info, "iterations": last}))
        atomic_write(directory / DONE, json.dumps({"iterations": last}))
    return last


def read_frames(directory: Path, info: Mapping[str, int], n: int, n_atoms: int, kT: float) -> dict[str, np.ndarray]:
    """The lowest temperature's frames of the first `n` iterations of one sealed segment: positions
    (n, atoms, 3) nm, potential energy (n,) kJ/mol, the walker that was there (n,), and the
    exchange counts of those iterations."""
    import netCDF4

    n_held = int(info["iterations"])
    storage = reporter(directory, n_atoms, mode="r")
    try:
        if storage.read_last_iteration(last_checkpoint=False) < n_held:  # a segment sealed early holds more
            raise Bgp4Error(
                f"{directory} does not hold its {n_held} iterations; "
                "remove it and every later segment, then rerun to make them again"
            )
        iterations = slice(1, n + 1)  # iteration 0 is the segment's starting point
        reduced, _, _ = storage.read_energies(iterations)  # (n, walkers, temperatures), kT of each
        where = storage.read_replica_thermodynamic_states(iterations)  # (n, walkers)
        accepted, proposed = storage.read_mixing_statistics(iterations)
    finally:
        storage.close()
    walker = np.argmax(where == 0, axis=1)
    # The reporter reads positions one iteration at a time, as unit-carrying SamplerStates (15 ms
    # each); its analysis file holds them as positions[iteration, walker, atom, xyz] in nm.
    with netCDF4.Dataset(str(directory / STORAGE), "r") as analysis:
        positions = np.asarray(analysis.variables["positions"][iterations], dtype=np.float32)
    return {
        "xyz": positions[np.arange(n), walker],
        "epot": reduced[np.arange(n), walker, 0] * kT,  # no barostat: u = U / kT exactly
        "walker": walker,
        "accepted": accepted.sum(axis=0),
        "proposed": proposed.sum(axis=0),
    }
