"""Trajectory files: writing and reading mdtraj HDF5 files with bgp4's run settings.

A bgp4 trajectory file is a plain mdtraj HDF5 file (`mdtraj.load(path)` opens it): coordinates
in nm, `potentialEnergy` (and `kineticEnergy`, `temperature` for MD) per frame in kJ/mol and K.
bgp4 adds a JSON string attribute `bgp4_settings` on the root node and optional extra per-frame
arrays (`replica` for MD; `log_q`, `log_w`, `finite` for samples) as root-level arrays.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mdtraj
import numpy as np
import tables

from bgp4._io import atomic_write
from bgp4.errors import InputError, first_line
from bgp4.simulation.molecule import Molecule, molecule_of

__all__ = [
    "SETTINGS_ATTR",
    "TrajectoryData",
    "write_trajectory",
    "read_settings",
    "data_settings",
    "md_data_settings",
    "frame_count",
    "load_trajectory",
    "resolve_temperature",
    "held_out_count",
    "train_test_split",
    "relabel_rotors",
    "md_steps_per_frame",
    "md_energy_evaluations",
]

SETTINGS_ATTR = "bgp4_settings"


@dataclass
class TrajectoryData:
    """Frames of one file: `xyz` (n, atoms, 3) float32 nm, `energies` (n,) kJ/mol, extras by name."""

    xyz: np.ndarray
    energies: np.ndarray
    topology: mdtraj.Topology
    settings: dict[str, Any] = field(default_factory=dict)
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    source: str = ""  # the file it was read from

    @property
    def n_frames(self) -> int:
        return int(self.xyz.shape[0])

    def molecule(self) -> Molecule:
        """The molecule the file records (`molecule` in its settings; the default where it records
        none); raises InputError when the frames have another number of atoms."""
        return molecule_of(self.settings, int(self.xyz.shape[1]), self.source or "the trajectory")


def write_trajectory(
    path: str | os.PathLike,
    topology: mdtraj.Topology,
    chunks,
    settings: dict[str, Any],
    extras: dict[str, np.ndarray] | None = None,
) -> None:
    """Write frames to `path` atomically (a temporary file renamed at the end).

    `chunks` yields dicts with `coordinates` (k, atoms, 3) nm and optionally `time` (ps),
    `potentialEnergy`, `kineticEnergy` (kJ/mol), `temperature` (K): they are written as they come,
    so memory stays at one chunk. `extras` are per-frame arrays stored beside the frames.
    """

    def write(tmp: Path) -> None:
        # zlib saves only a quarter of the size of float32 coordinates but makes writing 500,000
        # frames take 3.6 s instead of 0.15 s (and reading 1.1 s instead of 0.1 s)
        with mdtraj.formats.HDF5TrajectoryFile(str(tmp), "w", compression=None) as f:
            f.topology = topology
            for chunk in chunks:
                f.write(**chunk)
        with tables.open_file(str(tmp), "a") as h5:
            h5.root._v_attrs[SETTINGS_ATTR] = json.dumps(settings, sort_keys=True)
            for name, values in (extras or {}).items():
                h5.create_array(h5.root, name, np.asarray(values))

    atomic_write(path, write)


def read_settings(path: str | os.PathLike) -> dict[str, Any]:
    """The bgp4 settings stored in a trajectory file ({} for a plain mdtraj file)."""
    with tables.open_file(str(path), "r") as h5:
        return _settings_of(h5)


def _check_file(path: Path) -> None:
    if path.is_dir():
        raise InputError(f"{path} is a directory, not a data file")
    if not path.is_file():
        raise InputError(f"data file not found: {path}")


def data_settings(path: str | os.PathLike) -> dict[str, Any]:
    """The bgp4 settings of a trajectory file ({} for a plain mdtraj file), read without its
    frames; InputError for a missing file, a directory, or a file that is no HDF5 file."""
    path = Path(path)
    _check_file(path)
    try:
        return read_settings(path)
    except Exception:  # noqa: BLE001 - any reader failure means "not an HDF5 file"
        raise InputError(f"{path} is not an mdtraj HDF5 trajectory file") from None


def md_data_settings(path: str | os.PathLike) -> dict[str, Any]:
    """`data_settings` of a `bgp4 simulate` (or `bgp4 merge`) output; InputError for any other file."""
    settings = data_settings(path)
    if settings.get("kind") != "md" or settings.get("temperature") is None:
        kind = settings.get("kind") or "none recorded"
        raise InputError(f"{path} is no bgp4 MD data file (kind: {kind}): give a `bgp4 simulate` output")
    return settings


def frame_count(path: str | os.PathLike) -> int:
    """Frames in a trajectory file, read from its coordinates' shape (no frame is read);
    InputError for a file that `data_settings` refuses or one without coordinates."""
    path = Path(path)
    _check_file(path)
    try:
        with tables.open_file(str(path), "r") as h5:  # one open: the shape alone, no settings or frames
            shape = h5.root.coordinates.shape if "/coordinates" in h5 else None
    except Exception:  # noqa: BLE001 - any reader failure means "not an HDF5 file", as data_settings says
        raise InputError(f"{path} is not an mdtraj HDF5 trajectory file") from None
    if shape is None:
        raise InputError(f"{path} is an HDF5 file without coordinates, not an mdtraj trajectory")
    return int(shape[0])


def _settings_of(h5: tables.File) -> dict[str, Any]:
    attrs = h5.root._v_attrs
    raw = attrs[SETTINGS_ATTR] if SETTINGS_ATTR in attrs._v_attrnames else None
    return json.loads(raw) if raw else {}


def load_trajectory(
    path: str | os.PathLike, n_atoms: int | None = None, extras: tuple[str, ...] = ()
) -> TrajectoryData:
    """Read a trajectory file; raise InputError if it is missing, unreadable, or (`n_atoms` given)
    has another number of atoms per frame. `.molecule()` of the result checks it against the
    molecule the file records."""
    path = Path(path)
    _check_file(path)
    try:
        with mdtraj.formats.HDF5TrajectoryFile(str(path), "r") as f:
            topology = f.topology
            frames = f.read()
    except Exception as exc:  # noqa: BLE001 - any reader failure means "not an mdtraj HDF5 file"
        reason = first_line(exc, 1000)
        # PyTables' first line for a non-HDF5 file is its back-trace header, which says nothing
        reason = "" if "back trace" in reason else f" ({reason})"
        raise InputError(f"{path} is not an mdtraj HDF5 trajectory file{reason}") from None
    xyz = np.asarray(frames.coordinates, dtype=np.float32)
    if xyz.ndim != 3 or xyz.shape[0] == 0:
        raise InputError(f"{path} holds no frames")
    if n_atoms is not None and xyz.shape[1] != n_atoms:
        raise InputError(f"{path} has {xyz.shape[1]} atoms per frame, expected {n_atoms}")
    energies = frames.potentialEnergy
    energies = np.full(xyz.shape[0], np.nan) if energies is None else np.asarray(energies, dtype=np.float64)
    stored: dict[str, np.ndarray] = {}
    with tables.open_file(str(path), "r") as h5:
        settings = _settings_of(h5)
        for name in extras:
            if name in h5.root:
                stored[name] = np.asarray(h5.get_node(h5.root, name).read())
    return TrajectoryData(xyz, energies, topology, settings, stored, str(path))


def resolve_temperature(recorded: float | None, given: float | None, source: str | os.PathLike) -> float:
    """The temperature (K) that `source` (a data file, a run's complete.json) records, or `given`
    (the user's --temperature) where it records none, e.g. a plain mdtraj file.

    Raises InputError when neither says, or when both do and disagree: a wrong temperature gives
    wrong kT, energies and importance weights without any other sign.
    """
    if recorded is None:
        if given is None:
            raise InputError(f"{source} records no temperature; pass temperature (--temperature) in K")
        if not given > 0:
            raise InputError(f"temperature (--temperature) must be positive (K), got {given}")
        return float(given)
    if given is not None and float(given) != float(recorded):
        raise InputError(
            f"{source} records {float(recorded):g} K, but temperature (--temperature) says {float(given):g} K"
        )
    return float(recorded)


def held_out_count(n: int, test_fraction: float) -> int:
    """How many of `n` frames a split holds out for testing."""
    return int(round(n * test_fraction))


def train_test_split(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded random split of range(n) into (train, test) index arrays, both sorted."""
    if not 0.0 <= test_fraction < 1.0:
        raise InputError(f"test fraction must be in [0, 1), got {test_fraction}")
    order = np.random.default_rng(seed).permutation(n)
    n_test = held_out_count(n, test_fraction)
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def relabel_rotors(xyz: np.ndarray, triples: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """Frames (B, n_atoms, 3) with the atoms of each triple relabelled cyclically, shift[b, t] in {0, 1, 2}.

    triples (T, 3) atom indices (`bgp4.simulation.atoms.rotor_hydrogens`); atom `triples[t][i]` of frame b
    takes the position of atom `triples[t][(i + shifts[b, t]) % 3]`. Shift 0 leaves a frame as it
    is. For interchangeable atoms this is the same physical configuration under another labelling,
    of the same energy: a data augmentation that keeps frames on the Boltzmann distribution.
    """
    triples = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
    b, n = xyz.shape[:2]
    order = np.broadcast_to(np.arange(n), (b, n)).copy()
    source = triples[np.arange(len(triples))[None, :, None], (np.arange(3)[None, None, :] + shifts[:, :, None]) % 3]
    order[:, triples.reshape(-1)] = source.reshape(b, -1)
    return np.take_along_axis(xyz, order[:, :, None], axis=1)


def md_steps_per_frame(settings: dict[str, Any]) -> int | None:
    """MD integration steps (one force evaluation each) behind one frame of the data: `save_every`,
    times the number of temperatures for replica exchange (every walker steps between two frames
    of the lowest one); None where the data records no `save_every`."""
    save_every = settings.get("save_every")
    if not save_every:
        return None
    return int(save_every) * max(1, len(settings.get("temperatures") or ()))


def md_energy_evaluations(settings: dict[str, Any], n_frames: int) -> int | None:
    """MD integration steps (one force evaluation each) of the whole data file, as the field's table
    counts MD: its `n_frames` frames times `md_steps_per_frame`, plus the equilibration of every
    replica (plain MD: `equilibration_ps` / `timestep_fs` steps each) or every walker (replica
    exchange: that many, rounded to whole iterations, as `bgp4.simulation.remd` runs it). Energy
    minimization is not counted. A merged file (`merged_from`, `bgp4 merge`) counts the sum its
    sources record. None where the data records no `save_every` or `timestep_fs`."""
    if "merged_from" in settings:
        counts = [source.get("md_energy_evaluations") for source in settings["merged_from"]]
        return None if None in counts else int(sum(counts))
    per_frame, timestep = md_steps_per_frame(settings), settings.get("timestep_fs")
    if per_frame is None or not timestep:
        return None
    steps = float(settings.get("equilibration_ps") or 0.0) * 1000.0 / float(timestep)
    save_every, walkers = int(settings["save_every"]), len(settings.get("temperatures") or ())
    if walkers:
        equilibration = walkers * int(round(steps / save_every)) * save_every
    else:
        equilibration = int(settings.get("replicas") or 1) * int(round(steps))
    return int(n_frames) * per_frame + equilibration
