"""OpenMM energies and forces as a differentiable torch function, spread over worker processes.

Units at the boundary: positions in nm; `energy`/`energy_and_forces` return reduced energies
u = U/kT (kT in kJ/mol at the given temperature) and forces in kT/nm; `energies_kjmol` returns
plain kJ/mol. A sample that cannot be evaluated (NaN/inf or huge coordinates, overlapping atoms,
a non-finite OpenMM result, an OpenMM exception) gets energy +inf and zero force.

Workers are fresh interpreters running `python -m bgp4._energy_worker` (protocol described there),
which imports numpy and openmm but never torch or the rest of bgp4: they start in about 0.3 s and
never re-run the caller's `__main__`, as multiprocessing's spawn would. Frames travel as float64
bytes over pipes and the per-frame loop runs entirely inside the worker.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import subprocess
import sys
import threading
import weakref
from collections import deque
from pathlib import Path

import numpy as np
import openmm
import torch

from bgp4._energy_worker import HEADER as _HEADER, LENGTH as _LENGTH
from bgp4.errors import Bgp4Error, InputError
from bgp4.molecule import kT as thermal_energy
from bgp4.platform import get_platform

#: Coordinates beyond this many nm are treated as absurd (+inf energy) without calling OpenMM.
MAX_ABS_COORDINATE_NM = 1.0e4
_GPU_PLATFORMS = ("CUDA", "OpenCL")


def _worker_command(platform_name: str, props: dict[str, str], die_with_parent: bool) -> tuple[list[str], dict[str, str]]:
    """argv and environment of one worker; it imports this very bgp4, whatever the cwd, sys.path or install mode."""
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []  # keeps the cwd (and any bgp4/ there) off its sys.path
    argv = [sys.executable, *safe_path, "-m", "bgp4._energy_worker", platform_name, json.dumps(props),
            str(os.getpid()), "01"[die_with_parent]]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH")) if p)
    return argv, env


def regularize_energy(u: torch.Tensor, high: float = 1e3, max: float = 1e9) -> torch.Tensor:  # noqa: A002
    """Reduced energies (kT) made safe for losses: u below `high`, high + log(1 + u - high) above.

    Continuous and monotone; clamped at `max`. NaN and +inf map to `max` with zero gradient.
    """
    if not high < max:
        raise InputError(f"regularize_energy needs high < max, got high={high}, max={max}")
    u = torch.where(torch.isnan(u), torch.full_like(u, float("inf")), u)
    # log1p of the clamped excess keeps the unused branch finite, so torch.where never mixes NaN gradients.
    soft = high + torch.log1p(torch.clamp(u - high, min=0.0))
    return torch.clamp(torch.where(u > high, soft, u), max=max)


class _WorkerDied(Exception):
    """A worker's pipe broke (the process died or was killed)."""


class _Worker:
    """Parent-side handle of one worker process: Popen plus raw pipe fds."""

    def __init__(self, xml: bytes, platform_name: str, props: dict[str, str]) -> None:
        # PR_SET_PDEATHSIG fires when the creating *thread* exits, so only ask for it from the main thread.
        main_thread = threading.current_thread() is threading.main_thread()
        argv, env = _worker_command(platform_name, props, main_thread)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, close_fds=True,
                                     env=env)
        self.pid = self.proc.pid
        self.in_fd, self.out_fd = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        for fd in (self.in_fd, self.out_fd):  # 1 MiB pipes: a chunk crosses in one write, not 64 KiB steps
            with contextlib.suppress(OSError, AttributeError):
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)
        with contextlib.suppress(_WorkerDied):  # a worker that died at once is reported by wait_ready
            self._write(_LENGTH.pack(len(xml)) + xml)

    def wait_ready(self) -> None:
        """Block until the worker has built its Context; Bgp4Error (worker killed) if it could not."""
        size, message = np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.uint8)
        try:
            self._readinto(size)
            message = np.zeros(int(size[0]), dtype=np.uint8)
            self._readinto(message)
        except _WorkerDied:
            size[0] = -1
        if size[0]:
            text = message.tobytes().decode(errors="replace") or f"it died (exit code {self.kill()})"
            self.kill()
            raise Bgp4Error(f"OpenMM energy worker failed to start: {text}")

    def send(self, frames: np.ndarray, want_forces: bool) -> None:
        """Send (n, n_atoms, 3) float64 C-contiguous frames in nm."""
        self._write(_HEADER.pack(len(frames), int(want_forces)))
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
                view = view[os.write(self.in_fd, view):]
        except OSError:  # BrokenPipeError, or the fd already closed
            raise _WorkerDied from None

    def _readinto(self, array: np.ndarray) -> None:
        view, got = memoryview(array).cast("B"), 0
        while got < len(view):
            k = os.readv(self.out_fd, [view[got:]])
            if k == 0:
                raise _WorkerDied
            got += k

    def kill(self) -> int:
        """SIGKILL (if still running), reap, close the pipes; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.stdin.close()
        self.proc.stdout.close()
        return self.proc.wait()


class _Pool:
    """Worker slots, dynamic chunk scheduling, replacement of dead workers (one retry per chunk)."""

    def __init__(self, xml: bytes, platform_name: str, props: dict[str, str], n_workers: int) -> None:
        self.spec = (xml, platform_name, props)
        self.slots: list[_Worker | None] = [None] * n_workers
        self.lock = threading.Lock()
        self.closed = False
        self.owner = os.getpid()  # a forked child inherits this object but must never drive or kill the workers

    def start(self, slots: list[int]) -> None:
        """Start workers in the empty `slots`, all at once, and wait until each is ready."""
        fresh = {i: _Worker(*self.spec) for i in slots if self.slots[i] is None}
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
                        self.slots[i].send(frames[busy[i][0]:busy[i][1]], want_forces)
                    except _WorkerDied:
                        self._failed(i, busy.pop(i), pending, retried)
                by_fd = {self.slots[i].out_fd: i for i in busy}
                for fd in select.select(list(by_fd), [], [])[0] if by_fd else []:
                    i = by_fd[fd]
                    a, b = busy.pop(i)
                    try:
                        self.slots[i].receive_into(energies[a:b], forces[a:b] if want_forces else None)
                    except _WorkerDied:
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


def _to_numpy(x: torch.Tensor) -> np.ndarray:
    x = x.detach().cpu()
    return (x if x.dtype in (torch.float32, torch.float64) else x.double()).numpy()


def _to_torch(a: np.ndarray, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """float64 numpy -> tensor of `dtype` on `device` (the dtype conversion done by numpy)."""
    np_dtype = {torch.float32: np.float32, torch.float64: np.float64}.get(dtype)
    t = torch.from_numpy(a.astype(np_dtype, copy=False)) if np_dtype else torch.from_numpy(a).to(dtype)
    return t.to(device)


class _ReducedEnergy(torch.autograd.Function):
    """u(x) in kT with du/dx = -F/kT from OpenMM forces (no finite differences).

    The arithmetic runs in numpy: torch's threaded element-wise kernels take milliseconds on
    these small arrays here (thread wake-up), numpy microseconds.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, bridge: OpenMMEnergy) -> torch.Tensor:
        want_forces = bool(ctx.needs_input_grad[0])
        u, forces = bridge._reduced(_to_numpy(x), want_forces)
        if want_forces:
            ctx.du_dx = np.negative(forces, out=forces).reshape(len(u), -1)  # (B, 3 n_atoms) in kT/nm
            ctx.valid, ctx.x_meta = np.isfinite(u), (x.shape, x.dtype, x.device)
        return _to_torch(u, x.dtype, x.device)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_u: torch.Tensor) -> tuple[torch.Tensor, None]:
        g = _to_numpy(grad_u).astype(np.float64, copy=False)
        # Invalid samples carry zero force; zeroing g there too keeps an inf/NaN upstream gradient out.
        g = np.where(ctx.valid, g, 0.0)
        shape, dtype, device = ctx.x_meta
        return _to_torch(g[:, None] * ctx.du_dx, dtype, device).reshape(shape), None


class OpenMMEnergy:
    """Batched OpenMM energies and forces of one system at one temperature, in worker processes.

    Args:
        system: an `openmm.System` or its XML serialization.
        temperature: in K; energies are reduced by kT = k_B T (kJ/mol).
        n_workers: worker processes (default `os.cpu_count()`); always 1 on CUDA/OpenCL.
        platform: OpenMM platform name as for `bgp4.platform.get_platform` ("auto" -> Reference).

    Use as a context manager or call `close()`; leftover workers are also stopped when the object
    is collected, at interpreter exit, and (on Linux) when the parent dies.
    """

    def __init__(self, system: openmm.System | str, temperature: float, n_workers: int | None = None,
                 platform: str = "auto") -> None:
        if not isinstance(system, (openmm.System, str)):
            raise InputError(f"system must be an openmm.System or its XML string, got {type(system).__name__}")
        xml = system if isinstance(system, str) else openmm.XmlSerializer.serialize(system)
        try:
            system = openmm.XmlSerializer.deserialize(xml) if isinstance(system, str) else system
        except Exception as exc:
            raise InputError(f"system XML could not be read by OpenMM: {exc}") from None
        temperature = float(temperature)
        if not (np.isfinite(temperature) and temperature > 0):
            raise InputError(f"temperature must be a positive number of K, got {temperature}")
        platform_obj, props = get_platform(platform)
        self.platform = platform_obj.getName()
        if self.platform in _GPU_PLATFORMS:
            n_workers = 1  # one context owns the device; more would only contend for it
        n_workers = (os.cpu_count() or 1) if n_workers is None else n_workers
        if not isinstance(n_workers, (int, np.integer)) or isinstance(n_workers, bool) or n_workers < 1:
            raise InputError(f"n_workers must be a positive integer, got {n_workers!r}")
        self.temperature: float = temperature
        self.kT: float = thermal_energy(temperature)  # kJ/mol
        self.n_atoms: int = system.getNumParticles()
        self.n_workers: int = int(n_workers)
        self.n_nonfinite: int = 0
        self.last_nonfinite: int = 0
        self._pool = _Pool(xml.encode(), self.platform, props, self.n_workers)
        self._finalizer = weakref.finalize(self, self._pool.close)  # at collection and at exit
        self._pool.start(list(range(self.n_workers)))

    def _check(self, shape: tuple[int, ...], floating: bool) -> None:
        n = self.n_atoms
        if not (len(shape) == 2 and shape[1] == 3 * n or len(shape) == 3 and tuple(shape[1:]) == (n, 3)):
            raise InputError(f"positions must have shape (B, {3 * n}) or (B, {n}, 3), got {tuple(shape)}")
        if not floating:
            raise InputError("positions must be floating point numbers (nm)")

    def _frames(self, x: np.ndarray) -> np.ndarray:
        """(B, 3 n_atoms) or (B, n_atoms, 3) -> C-contiguous float64 (B, n_atoms, 3) nm."""
        x = np.asarray(x)
        self._check(x.shape, np.issubdtype(x.dtype, np.floating))
        return np.ascontiguousarray(x, dtype=np.float64).reshape(len(x), self.n_atoms, 3)

    def _evaluate(self, x: np.ndarray, want_forces: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """Energies (B,) kJ/mol (+inf where invalid) and forces (B, n_atoms, 3) kJ/mol/nm (0 there)."""
        if self._pool.closed:
            raise Bgp4Error("OpenMMEnergy is closed")
        frames = self._frames(x)
        # One pass: NaN propagates through max and fails the comparison, as does inf.
        ok = np.abs(frames).max(axis=(1, 2), initial=0.0) <= MAX_ABS_COORDINATE_NM
        if ok.all():  # the common case: results land in the returned arrays without copies
            energies, forces = self._pool.run(frames, want_forces)
        else:
            energies = np.full(len(frames), np.inf)
            forces = np.zeros(frames.shape) if want_forces else None
            if ok.any():
                e, f = self._pool.run(np.ascontiguousarray(frames[ok]), want_forces)
                energies[ok] = e
                if want_forces:
                    forces[ok] = f
        self.last_nonfinite = int(np.count_nonzero(~np.isfinite(energies)))
        self.n_nonfinite += self.last_nonfinite
        return energies, forces

    def _reduced(self, x: np.ndarray, want_forces: bool) -> tuple[np.ndarray, np.ndarray | None]:
        energies, forces = self._evaluate(x, want_forces)
        energies /= self.kT  # in place: these arrays are ours
        if want_forces:
            forces /= self.kT
        return energies, forces

    def energies_kjmol(self, x: np.ndarray) -> np.ndarray:
        """Potential energies (B,) in kJ/mol of frames (B, 3 n_atoms) or (B, n_atoms, 3) in nm; +inf where invalid."""
        return self._evaluate(x, want_forces=False)[0]

    def energy_and_forces_kjmol(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Energies (B,) in kJ/mol and forces (B, n_atoms, 3) in kJ/mol/nm of frames in nm."""
        return self._evaluate(x, want_forces=True)

    def energy_and_forces(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Reduced energies (B,) in kT and forces (B, n_atoms, 3) in kT/nm of frames in nm."""
        return self._reduced(x, want_forces=True)

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        """Reduced energies u = U/kT, shape (B,), of x (B, 3 n_atoms) or (B, n_atoms, 3) in nm.

        Same device and dtype as x; differentiable (du/dx = -F/kT in 1/nm); +inf where invalid.
        """
        if not isinstance(x, torch.Tensor):
            raise InputError(f"energy() takes a torch tensor, got {type(x).__name__}; use energies_kjmol for numpy")
        self._check(tuple(x.shape), x.is_floating_point())
        return _ReducedEnergy.apply(x, self)

    __call__ = energy

    def regularized(self, x: torch.Tensor, high: float = 1e3, max: float = 1e9) -> torch.Tensor:  # noqa: A002
        """`regularize_energy(self.energy(x), high, max)`: reduced energies (B,) in kT, safe for losses."""
        return regularize_energy(self.energy(x), high=high, max=max)

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the running workers."""
        return [w.pid for w in self._pool.slots if w is not None]

    def close(self) -> None:
        """Stop the workers; further evaluations raise Bgp4Error."""
        self._finalizer()

    def __enter__(self) -> OpenMMEnergy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"OpenMMEnergy(n_atoms={self.n_atoms}, {self.temperature} K, {self.platform}, n_workers={self.n_workers})"
