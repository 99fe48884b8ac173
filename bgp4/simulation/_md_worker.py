"""One MD replica as a process of its own: `python -m bgp4.simulation._md_worker WORKDIR REPLICA SETTINGS PARENT_PID`.

`bgp4.simulation.md.simulate` starts one such process per replica. A fresh interpreter started
with `-m` never re-runs the caller's `__main__` (as multiprocessing's spawn would), so a script
that calls `simulate` needs no `if __name__ == "__main__":` guard. SETTINGS is the JSON of the
resolved `MDSettings`; the replica dies with PARENT_PID (Linux) and ignores Ctrl-C, which the
parent handles by stopping it.

Messages to the parent are JSON lines on stdout: {"frames": n} (frames committed or written so far)
and, when the replica fails, {"error": text} before exit code 1; the traceback is kept in
`replica-N.error.txt` beside the records. Anything else the process prints goes to stderr.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bgp4._child import die_with_parent
from bgp4._io import atomic_write
from bgp4.errors import Bgp4Error
from bgp4.simulation._records import CHECKPOINT_EVERY, FRAMES_FILE, PROGRESS_EVERY, STATE_FILE, read_state, record_dtype
from bgp4.simulation.md import MDSettings

# openmm, bgp4.simulation.molecule and bgp4.platform are imported lazily: the replica sets its signals and
# its tie to the parent (main) before it spends a few tenths of a second importing OpenMM.
if TYPE_CHECKING:
    import openmm

    from bgp4.simulation.molecule import Molecule

__all__ = ["ERROR_FILE", "main", "run_replica"]

ERROR_FILE = "replica-{}.error.txt"


def run_replica(workdir: str, replica: int, settings: dict, progress: Callable[[int], None] | None = None) -> None:
    """Run one replica until it holds its share of frames (resuming from its checkpoint).

    `progress(n)` is told the frames held so far: at the start, every PROGRESS_EVERY frames and at
    each checkpoint. Positions are stored in nm, energies in kJ/mol.
    """
    from bgp4.simulation.molecule import molecule_of
    from bgp4.stage import Stage

    s = MDSettings(**settings)
    seed = s.seeds()[replica]
    work = Path(workdir)
    state_path, frames_path = work / STATE_FILE.format(replica), work / FRAMES_FILE.format(replica)
    tell = progress or (lambda n: None)

    molecule = molecule_of(Stage(work).recorded(), source=work)  # the run's record: system and structure
    record = record_dtype(molecule.n_atoms)
    integrator, context = _context(molecule, s, seed)
    done = _start(context, integrator, molecule, s, seed, state_path)
    with open(frames_path, "ab") as f:
        f.truncate(done * record.itemsize)  # drop records written after the last checkpoint
    tell(done)
    _check_units(context)
    _run(context, integrator, s, record, done, s.frames_of(replica), frames_path, state_path, tell)


def _context(molecule: Molecule, s: MDSettings, seed: int) -> tuple[openmm.Integrator, openmm.Context]:
    """The Langevin integrator (seeded) and the OpenMM context of the replica."""
    import openmm

    from bgp4.platform import get_platform

    integrator = openmm.LangevinMiddleIntegrator(s.temperature, s.friction, s.timestep_fs / 1000.0)
    integrator.setRandomNumberSeed(seed)
    platform, props = get_platform(s.platform)
    return integrator, openmm.Context(molecule.system, integrator, platform, props)


def _start(
    context: openmm.Context,
    integrator: openmm.Integrator,
    molecule: Molecule,
    s: MDSettings,
    seed: int,
    state_path: Path,
) -> int:
    """Resume the replica from its checkpoint, or minimize, equilibrate and write its first one; frames held."""
    import openmm

    state = read_state(state_path)
    if state is not None:
        done, checkpoint = state
        context.loadCheckpoint(checkpoint)
        return done
    context.setPositions(molecule.positions)
    openmm.LocalEnergyMinimizer.minimize(context)
    context.setVelocitiesToTemperature(s.temperature, seed)
    integrator.step(int(round(s.equilibration_ps * 1000.0 / s.timestep_fs)))
    atomic_write(state_path, json.dumps({"frames": 0}).encode() + b"\n" + context.createCheckpoint())
    return 0


def _check_units(context: openmm.Context) -> None:
    """Refuse a platform whose raw values are not nm and kJ/mol (`_run` reads them without units)."""
    import openmm

    # Quantity unit conversion costs ~35 us a frame (10 % of the MD); check the units once,
    # then read the raw values.
    probe = context.getState(getPositions=True, getEnergy=True)
    if (
        probe.getPositions(asNumpy=True).unit != openmm.unit.nanometer
        or probe.getPotentialEnergy().unit != openmm.unit.kilojoule_per_mole
    ):
        raise Bgp4Error("OpenMM returned positions or energies in unexpected units")


def _run(
    context: openmm.Context,
    integrator: openmm.Integrator,
    s: MDSettings,
    record: np.dtype,
    done: int,
    target: int,
    frames_path: Path,
    state_path: Path,
    tell: Callable[[int], None],
) -> None:
    """Append frames from `done` to `target`, fsynced and checkpointed every CHECKPOINT_EVERY frames."""
    buffer = np.empty(CHECKPOINT_EVERY, dtype=record)
    xyz, epot, ekin = buffer["xyz"], buffer["epot"], buffer["ekin"]  # field views, made once
    with open(frames_path, "ab") as f:
        while done < target:
            n = min(CHECKPOINT_EVERY, target - done)
            for i in range(n):
                integrator.step(s.save_every)
                st = context.getState(getPositions=True, getEnergy=True)
                xyz[i] = st.getPositions(asNumpy=True)._value
                epot[i] = st.getPotentialEnergy()._value
                ekin[i] = st.getKineticEnergy()._value
                if (i + 1) % PROGRESS_EVERY == 0:
                    tell(done + i + 1)
            f.write(buffer[:n].tobytes())
            f.flush()
            os.fsync(f.fileno())
            done += n
            atomic_write(state_path, json.dumps({"frames": done}).encode() + b"\n" + context.createCheckpoint())
            tell(done)


def _send(fd: int, message: dict) -> None:
    data = memoryview(json.dumps(message).encode() + b"\n")
    while len(data):
        data = data[os.write(fd, data) :]


def main(argv: list[str]) -> int:
    """Run the replica named by argv (workdir, replica, settings JSON, parent pid); returns the exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the parent, which stops us
    workdir, replica, settings, parent_pid = argv[0], int(argv[1]), json.loads(argv[2]), int(argv[3])
    if not die_with_parent(parent_pid):
        return 1  # the parent died before the tie took effect
    # A private copy of the message pipe, and fd 1 pointed at stderr: stray prints cannot corrupt it.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    try:
        run_replica(workdir, replica, settings, lambda n: _send(out_fd, {"frames": n}))
    except Exception as exc:  # noqa: BLE001 - any failure is reported to the parent, which raises one error
        error_file = Path(workdir) / ERROR_FILE.format(replica)
        try:
            atomic_write(error_file, traceback.format_exc())
            where = f" (traceback in {error_file})"
        except OSError:
            where = ""
        _send(out_fd, {"error": f"{type(exc).__name__}: {exc}{where}"})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
