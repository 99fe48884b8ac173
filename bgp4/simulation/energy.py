"""OpenMM energies and forces as numpy arrays or as a differentiable torch function (u in kT).

`OpenMMEnergy` method names say what they take and return. Every method takes positions in nm,
shape (n, n_atoms, 3) or (n, 3 n_atoms):

    energies_kjmol(x)             numpy -> energies (n,) kJ/mol
    energies_forces_kjmol(x)      numpy -> energies (n,) kJ/mol, forces (n, n_atoms, 3) kJ/mol/nm
    reduced_energies_forces(x)    numpy -> energies (n,) kT, forces (n, n_atoms, 3) kT/nm
    reduced_energy(x)             torch -> energies (n,) kT, differentiable (du/dx = -F/kT)
    regularized_reduced_energy(x) torch -> `regularize_energy` of the above, safe for losses

kT is k_B T in kJ/mol at the object's temperature. A sample that cannot be evaluated (NaN/inf or
huge coordinates, overlapping atoms, a non-finite OpenMM result, an OpenMM exception) gets energy
+inf and zero force. The worker processes that run OpenMM live in `bgp4.simulation._energy_pool`.
"""

from __future__ import annotations

import os
import weakref

import numpy as np
import openmm
import torch

from bgp4.errors import Bgp4Error, InputError
from bgp4.platform import get_platform, slow_on_reference
from bgp4.simulation._energy_pool import Pool
from bgp4.simulation.molecule import kT as thermal_energy

__all__ = ["MAX_ABS_COORDINATE_NM", "OpenMMEnergy", "regularize_energy", "md_energies_kjmol"]

#: Coordinates beyond this many nm are treated as absurd (+inf energy) without calling OpenMM.
MAX_ABS_COORDINATE_NM = 1.0e4
_GPU_PLATFORMS = ("CUDA", "OpenCL")


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
        platform: OpenMM platform name as for `bgp4.platform.get_platform` ("auto": Reference, or
            CPU above `bgp4.platform.AUTO_CPU_ATOMS` atoms or for a system with custom forces).

    Method names (table in the module docstring): plural `energies...` names take and return numpy arrays, the
    `..._kjmol` ones in kJ/mol and `reduced_...` ones in kT; singular `..._energy` names take and
    return torch tensors and are differentiable. Positions are always nm, (n, n_atoms, 3) or
    (n, 3 n_atoms).

    Use as a context manager or call `close()`; leftover workers are also stopped when the object
    is collected, at interpreter exit, and (on Linux) when the parent dies.
    """

    def __init__(
        self, system: openmm.System | str, temperature: float, n_workers: int | None = None, platform: str = "auto"
    ) -> None:
        if not isinstance(system, (openmm.System, str)):
            raise InputError(f"system must be an openmm.System or its XML string, got {type(system).__name__}")
        xml = system if isinstance(system, str) else openmm.XmlSerializer.serialize(system)
        try:
            system = openmm.XmlSerializer.deserialize(xml) if isinstance(system, str) else system
        except Exception as exc:  # noqa: BLE001 - any parser failure means a bad system
            raise InputError(f"system XML could not be read by OpenMM: {exc}") from None
        temperature = float(temperature)
        if not (np.isfinite(temperature) and temperature > 0):
            raise InputError(f"temperature must be a positive number of K, got {temperature}")
        platform_obj, props = get_platform(platform, system.getNumParticles(), slow_on_reference(system))
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
        self._pool = Pool(xml.encode(), self.platform, props, self.n_workers)
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
        """`_evaluate` divided by kT: energies (n,) kT and forces (n, n_atoms, 3) kT/nm or None."""
        energies, forces = self._evaluate(x, want_forces)
        energies /= self.kT  # in place: these arrays are ours
        if want_forces:
            forces /= self.kT
        return energies, forces

    def energies_kjmol(self, x: np.ndarray) -> np.ndarray:
        """Potential energies (n,) in kJ/mol of frames x (n, n_atoms, 3) or (n, 3 n_atoms) in nm (numpy).

        float64; +inf where invalid.
        """
        return self._evaluate(x, want_forces=False)[0]

    def energies_forces_kjmol(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(energies (n,) kJ/mol, forces (n, n_atoms, 3) kJ/mol/nm) of frames x (n, n_atoms, 3) nm (numpy).

        float64; energy +inf and force 0 where invalid.
        """
        return self._evaluate(x, want_forces=True)

    def reduced_energies_forces(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(energies (n,) kT, forces (n, n_atoms, 3) kT/nm) of frames x (n, n_atoms, 3) nm (numpy).

        float64; energy +inf and force 0 where invalid.
        """
        return self._reduced(x, want_forces=True)

    def reduced_energy(self, x: torch.Tensor) -> torch.Tensor:
        """Reduced energies u = U/kT (n,) of x (n, n_atoms, 3) or (n, 3 n_atoms) in nm (torch).

        Same device and dtype as x; differentiable (du/dx = -F/kT in 1/nm); +inf where invalid.
        """
        if not isinstance(x, torch.Tensor):
            raise InputError(
                f"reduced_energy() takes a torch tensor, got {type(x).__name__}; "
                "use energies_kjmol or reduced_energies_forces for numpy"
            )
        self._check(tuple(x.shape), x.is_floating_point())
        return _ReducedEnergy.apply(x, self)

    def regularized_reduced_energy(self, x: torch.Tensor, high: float = 1e3, max: float = 1e9) -> torch.Tensor:  # noqa: A002
        """`regularize_energy(self.reduced_energy(x), high, max)`: (n,) kT from x (n, n_atoms, 3) nm (torch).

        Differentiable and finite (at most `max`), safe for losses.
        """
        return regularize_energy(self.reduced_energy(x), high=high, max=max)

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
        return (
            f"OpenMMEnergy(n_atoms={self.n_atoms}, {self.temperature} K, {self.platform}, n_workers={self.n_workers})"
        )


def md_energies_kjmol(
    xyz: np.ndarray, stored: np.ndarray, system: openmm.System, temperature: float, workers: int = 0
) -> np.ndarray:
    """Potential energies (n,) in kJ/mol of MD frames `xyz` (n, n_atoms, 3) nm: `stored` (n,), the
    file's own, unless it holds no finite value (a plain mdtraj file stores none): then evaluated
    here on `workers` OpenMM processes (0: one per core), at a cost that grows with the frames."""
    if np.isfinite(stored).any():
        return stored
    with OpenMMEnergy(system, temperature, n_workers=workers or None) as energy:
        return energy.energies_kjmol(xyz)
