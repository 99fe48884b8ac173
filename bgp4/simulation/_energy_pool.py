"""Subprocess pool behind `bgp4.simulation.energy.OpenMMEnergy`: worker processes, chunk scheduling, restarts.

Workers are fresh interpreters running `python -m bgp4.simulation._energy_worker` (protocol described there),
which imports numpy and openmm but never torch or the rest of bgp4: they start in about 0.3 s and
never re-run the caller's `__main__`, as multiprocessing's spawn would. Frames travel as float64
bytes over pipes and the per-frame loop runs entirely inside the worker. This module imports no
torch either; units are those of the worker: nm in, kJ/mol and kJ/mol/nm out.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import subprocess
import threading
from collections import deque

import numpy as np

from bgp4._child import python_command
from bgp4.errors import Bgp4Error
from bgp4.simulation._energy_worker import HEADER, LENGTH

__all__ = ["Pool", "Worker", "WorkerDied", "worker_command"]


def worker_command(
    platform_name: str, props: dict[str, str], die_with_parent: bool
) -> tuple[list[str], dict[str, str]]:
    """argv and environment of one worker; it imports this very bgp4 (`bgp4._child`)."""
    return python_command(
        "-m",
        "bgp4.simulation._energy_worker",
        platform_name,
        json.dumps(props),
        str(os.getpid()),
        "01"[die_with_parent],
    )


class WorkerDied(Exception):
    """A worker's pipe broke (the process died or was killed)."""


class Worker:
    """Parent-side handle of one worker process: Popen plus raw pipe fds."""

    def __init__(self, xml: bytes, platform_name: str, props: dict[str, str]) -> None:
        # PR_SET_PDEATHSIG fires when the creating *thread* exits, so only ask for it from the main thread.
        main_thread = threading.current_thread() is threading.main_thread()
        argv, env = worker_command(platform_name, props, main_thread)
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, close_fds=True, env=env
        )
        self.pid = self.proc.pid
        self.in_fd, self.out_fd = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        for fd in (self.in_fd, self.out_fd):  # 1 MiB pipes: a chunk crosses in one write, not 64 KiB steps
            with contextlib.suppress(OSError, AttributeError):
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)
        with contextlib.suppress(WorkerDied):  # a worker that died at once is reported by wait_ready
            self._write(LENGTH.pack(len(xml)) + xml)

    def wait_ready(self) -> None:
        """Block until the worker has built its Context; Bgp4Error (worker killed) if it could not."""
        size, message = np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.uint8)
        try:
            self._readinto(size)
            message = np.zeros(int(size[0]), dtype=np.uint8)
            self._readinto(message)
        except WorkerDied:
            size[0] = -1
        if size[0]:
            text = message.tobytes().decode(errors="replace") or f"it died (exit code {self.kill()})"
            self.kill()
            raise Bgp4Error(f"OpenMM energy worker failed to start: {text}")

    def send(self, frames: np.ndarray, want_forces: bool) -> None:
        """Send (n, n_atoms, 3) float64 C-contiguous frames in nm."""
        self._write(HEADER.pack(len(frames), int(want_forces)))
        self._write(frames.data)

    def receive_into(self, energies: np.ndarray, forces: np.ndarray | None) -> None:
        """Read one reply straight into contiguous float64 slices (kJ/mol, kJ/mol/nm)."""
        self._readinto(energies)
        if forces is not None:
            self._readinto(forces)

    def _write(self, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        try:
            while len(view):
                view = view[os.write(self.in_fd, view) :]
        except OSError:  # BrokenPipeError, or the fd already closed
            raise WorkerDied from None

    def _readinto(self, array: np.ndarray) -> None:
        view, got = memoryview(array).cast("B"), 0
        while got < len(view):
            k = os.readv(self.out_fd, [view[got:]])
            if k == 0:
                raise WorkerDied
            got += k

    def kill(self) -> int:
        """SIGKILL (if still running), reap, close the pipes; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.stdin.close()
        self.proc.stdout.close()
        return self.proc.wait()


class Pool:
    """Worker slots, dynamic chunk scheduling, replacement of dead workers (one retry per chunk)."""

    def __init__(self, xml: bytes, platform_name: str, props: dict[str, str], n_workers: int) -> None:
        self.spec = (xml, platform_name, props)
        self.slots: list[Worker | None] = [None] * n_workers
        self.lock = threading.Lock()
        self.closed = False
        self.owner = os.getpid()  # a forked child inherits this object but must never drive or kill the workers

    def start(self, slots: list[int]) -> None:
        """Start workers in the empty `slots`, all at once, and wait until each is ready."""
        fresh = {i: Worker(*self.spec) for i in slots if self.slots[i] is None}
        try:
            for worker in fresh.values():
                worker.wait_ready()
        except BaseException:
            for worker in fresh.values():
                worker.kill()
            raise
        for i, worker in fresh.items():
            self.slots[i] = worker

    def run(self, frames: np.ndarray, want_forces: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """(n, n_atoms, 3) float64 nm -> energies (n,) kJ/mol and forces (n, n_atoms, 3) kJ/mol/nm or None."""
        with self.lock:
            if self.closed:
                raise Bgp4Error("OpenMMEnergy is closed")
            if os.getpid() != self.owner:
                raise Bgp4Error("OpenMMEnergy cannot be used in a forked child process; create one there")
            return self._run(frames, want_forces)

    def _run(self, frames: np.ndarray, want_forces: bool) -> tuple[np.ndarray, np.ndarray | None]:
        n, n_slots = len(frames), len(self.slots)
        energies = np.empty(n)
        forces = np.empty(frames.shape) if want_forces else None
        # Guided scheduling: chunks shrink as the batch drains (to >= 64 frames, a few ms), so a
        # worker slowed by other programs never leaves the other waiting long; small batches are
        # split evenly. Retried chunks go first.
        pending: deque[tuple[int, int]] = deque()
        retried: set[tuple[int, int]] = set()
        busy: dict[int, tuple[int, int]] = {}  # slot -> chunk in flight (one at a time: no pipe deadlock)
        cut = 0  # frames [0, cut) have been handed out
        try:
            while pending or cut < n or busy:
                idle = [i for i in range(n_slots) if i not in busy]
                self.start(idle)
                for i in idle:
                    if pending:
                        busy[i] = pending.popleft()
                    elif cut < n:
                        size = -(-n // n_slots) if n <= 128 * n_slots else max(64, -(-(n - cut) // (2 * n_slots)))
                        busy[i], cut = (cut, min(cut + size, n)), min(cut + size, n)
                    else:
                        break
                    try:
                        self.slots[i].send(frames[busy[i][0] : busy[i][1]], want_forces)
                    except WorkerDied:
                        self._failed(i, busy.pop(i), pending, retried)
                by_fd = {self.slots[i].out_fd: i for i in busy}
                for fd in select.select(list(by_fd), [], [])[0] if by_fd else []:
                    i = by_fd[fd]
                    a, b = busy.pop(i)
                    try:
                        self.slots[i].receive_into(energies[a:b], forces[a:b] if want_forces else None)
                    except WorkerDied:
                        self._failed(i, (a, b), pending, retried)
        except BaseException:
            # Interrupted (e.g. Ctrl-C) or failed: replies still in flight would desynchronize
            # the pipes, so busy workers are killed; empty slots restart on the next call.
            for i in busy:
                self._discard(i)
            raise
        return energies, forces

    def _failed(self, slot: int, chunk: tuple[int, int], pending: deque, retried: set) -> None:
        exit_code = self._discard(slot)
        if chunk in retried:
            raise Bgp4Error(f"OpenMM energy worker died twice on frames {chunk[0]}:{chunk[1]} (exit code {exit_code})")
        retried.add(chunk)
        pending.appendleft(chunk)

    def _discard(self, slot: int) -> int | None:
        worker, self.slots[slot] = self.slots[slot], None
        return None if worker is None else worker.kill()

    def close(self) -> None:
        """Stop all workers (idempotent); safe to call from a finalizer at interpreter exit."""
        self.closed = True
        workers, self.slots = [w for w in self.slots if w is not None], [None] * len(self.slots)
        if os.getpid() != self.owner:
            return
        for worker in workers:
            worker.proc.stdin.close()  # the worker exits on EOF; all EOFs first, so they exit in parallel
        for worker in workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.proc.wait(2.0)
            worker.kill()  # reaps it, and kills one that lingers
