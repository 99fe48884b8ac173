"""Worker process of `bgp4.simulation.energy.OpenMMEnergy`: evaluates frames in one OpenMM Context.

Run as `python -m bgp4.simulation._energy_worker PLATFORM PROPS_JSON PARENT_PID DIE_WITH_PARENT`. This module
must import only the standard library, numpy and openmm -- never torch or the rest of bgp4 (and
`bgp4/__init__.py` must stay free of heavy imports, since `-m` imports it first) -- so a worker
starts in a few tenths of a second and never re-runs the caller's `__main__`. The parent side
(start, scheduling, restarts) is `bgp4.simulation._energy_pool`.

Protocol (little endian, over stdin/stdout pipes): the parent sends the system XML (int64 length +
bytes); the worker answers int64 0 when ready, or int64 n + n bytes of error text. Then requests:
int64 n frames, int64 want_forces, n*n_atoms*3 float64 nm; reply: n float64 energies (kJ/mol, +inf
where the result is not finite), then if asked n*n_atoms*3 float64 forces (kJ/mol/nm, zero where
the energy is +inf). EOF ends it.
"""

from __future__ import annotations

import json
import math
import os
import signal
import struct
import sys

import numpy as np
import openmm

from bgp4._child import die_with_parent

__all__ = ["LENGTH", "HEADER", "main"]

LENGTH = struct.Struct("<q")  # XML length, and the start-up answer (0 or error text length)
HEADER = struct.Struct("<qq")  # request header: (number of frames, want forces)


def _read_exact(fd: int, n: int) -> bytearray | None:
    """n bytes from fd, or None at EOF."""
    buf, got = bytearray(n), 0
    while got < n:
        k = os.readv(fd, [memoryview(buf)[got:]])
        if k == 0:
            return None
        got += k
    return buf


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data).cast("B")
    while len(view):
        view = view[os.write(fd, view) :]


def _open_context(xml: bytes, platform_name: str, props: dict[str, str]) -> openmm.Context:
    """One Context of the system with its units checked; raises on any failure."""
    system = openmm.XmlSerializer.deserialize(xml.decode())
    platform = openmm.Platform.getPlatformByName(platform_name)
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), platform, props)
    context.setPositions(0.3 * np.arange(3.0 * system.getNumParticles()).reshape(-1, 3))
    state = context.getState(getEnergy=True, getForces=True)
    # The loop reads raw values (4 us/frame faster than value_in_unit); check their units once.
    kj = openmm.unit.kilojoule_per_mole
    if state.getPotentialEnergy().unit != kj or state.getForces(asNumpy=True).unit != kj / openmm.unit.nanometer:
        raise RuntimeError("unexpected OpenMM state units")
    return context


def _evaluate(context: openmm.Context, frames: np.ndarray, want_forces: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """(n, n_atoms, 3) nm -> energies (n,) kJ/mol and forces (n, n_atoms, 3) kJ/mol/nm or None."""
    n = len(frames)
    energies = np.full(n, math.inf)
    forces = np.zeros(frames.shape) if want_forces else None
    for i in range(n):
        try:
            context.setPositions(frames[i])
            state = context.getState(getEnergy=True, getForces=want_forces)
            energies[i] = state.getPotentialEnergy()._value
            if want_forces:
                forces[i] = state.getForces(asNumpy=True)._value
        except Exception:  # noqa: BLE001 - an OpenMM failure on one frame makes that frame +inf
            energies[i] = math.inf
    bad = ~np.isfinite(energies)
    if want_forces:
        bad |= ~np.isfinite(forces).all(axis=(1, 2))
        forces[bad] = 0.0
    energies[bad] = math.inf
    return energies, forces


def main(argv: list[str]) -> None:
    """Serve one parent until EOF. argv: platform name, properties (JSON), parent pid, "1" to die with it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the parent, which closes us.
    platform_name, props, parent_pid, tie = argv[0], json.loads(argv[1]), int(argv[2]), argv[3]
    if tie == "1" and not die_with_parent(parent_pid):
        os._exit(0)  # the parent died before the tie took effect
    # Keep private copies of the pipes and point fds 0/1 elsewhere, so stray prints cannot corrupt them.
    in_fd, out_fd = os.dup(0), os.dup(1)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)

    if (raw := _read_exact(in_fd, LENGTH.size)) is None or (xml := _read_exact(in_fd, LENGTH.unpack(raw)[0])) is None:
        return
    try:
        context = _open_context(xml, platform_name, props)
    except Exception as exc:  # noqa: BLE001 - report any start-up failure to the parent as text
        message = f"{type(exc).__name__}: {exc}".encode()
        _write_all(out_fd, LENGTH.pack(len(message)) + message)
        return
    n_atoms = context.getSystem().getNumParticles()
    _write_all(out_fd, LENGTH.pack(0))
    while (header := _read_exact(in_fd, HEADER.size)) is not None:
        n, want_forces = HEADER.unpack(header)
        if (data := _read_exact(in_fd, n * n_atoms * 24)) is None:
            return
        frames = np.frombuffer(data, dtype=np.float64).reshape(n, n_atoms, 3)
        energies, forces = _evaluate(context, frames, bool(want_forces))
        _write_all(out_fd, energies.data)
        if forces is not None:
            _write_all(out_fd, forces.data)


if __name__ == "__main__":
    main(sys.argv[1:])
