"""The on-disk records of one plain-MD replica in `<out>.partial/`: its frames and its state.

`replica-N.frames` holds raw records (`record_dtype`), appended as the replica runs.
`replica-N.state` holds a JSON header line naming how many of those records are committed, then
an OpenMM checkpoint taken at that frame. A replica restarted after a kill truncates its frames
to the committed count and continues from the checkpoint, so no frame is lost or duplicated.

>>> record_dtype(22).itemsize  # 22 atoms x 3 float32 (nm), then two float64 energies (kJ/mol)
280
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

__all__ = [
    "CHECKPOINT_EVERY",
    "FRAMES_FILE",
    "PROGRESS_EVERY",
    "STATE_FILE",
    "committed",
    "read_state",
    "record_dtype",
]

CHECKPOINT_EVERY = 2000  # frames between checkpoints: ~1.5 s of MD, a negligible cost
PROGRESS_EVERY = 250  # frames between progress messages to the parent
STATE_FILE = "replica-{}.state"
FRAMES_FILE = "replica-{}.frames"


def record_dtype(n_atoms: int) -> np.dtype:
    """One raw MD record: positions (n_atoms, 3) nm as float32, potential and kinetic energy kJ/mol."""
    return np.dtype([("xyz", "<f4", (n_atoms, 3)), ("epot", "<f8"), ("ekin", "<f8")])


def read_state(path: Path) -> tuple[int, bytes] | None:
    """(committed frames, OpenMM checkpoint) of a replica, or None before its first checkpoint."""
    if not path.exists():
        return None
    raw = path.read_bytes()
    header, _, checkpoint = raw.partition(b"\n")
    return int(json.loads(header)["frames"]), checkpoint


def committed(work: Path, replica: int) -> int:
    """Frames that replica `replica` has committed in the work directory `work`."""
    state = read_state(work / STATE_FILE.format(replica))
    return 0 if state is None else state[0]
