"""OpenMMEnergy: agreement with plain OpenMM, autograd, units, bad inputs, worker lifetime."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import openmm
import pytest
import torch

from bgp4.errors import Bgp4Error, InputError
from bgp4.simulation import _energy_pool
from bgp4.simulation.energy import OpenMMEnergy, md_energies_kjmol, regularize_energy
from bgp4.simulation.molecule import kT

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bridge(molecule):
    with OpenMMEnergy(molecule.system, 600.0, n_workers=2) as bridge:
        yield bridge


@pytest.fixture(scope="module")
def frames(md_frames):
    return md_frames[0][::10][:300]  # (300, 22, 3) nm, decorrelated MD frames


def direct(molecule, frames):
    """Energies (kJ/mol) and forces (kJ/mol/nm) from one plain Reference context."""
    context = openmm.Context(
        molecule.system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference")
    )
    energies, forces = [], []
    for frame in frames:
        context.setPositions(frame)
        state = context.getState(getEnergy=True, getForces=True)
        energies.append(state.getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole))
        forces.append(
            state.getForces(asNumpy=True).value_in_unit(openmm.unit.kilojoule_per_mole / openmm.unit.nanometer)
        )
    return np.array(energies), np.array(forces)


def gone(pid: int) -> bool:
    """True when the process no longer exists or is a zombie waiting to be reaped."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return "\nState:\tZ" in status


def wait_gone(pids: list[int], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(gone(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return all(gone(pid) for pid in pids)


def test_matches_single_reference_context(bridge, molecule, frames, md_frames):
    energies, forces = bridge.energies_forces_kjmol(frames)
    ref_e, ref_f = direct(molecule, frames)
    np.testing.assert_allclose(energies, ref_e, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(forces, ref_f, rtol=1e-5, atol=1e-6 * np.abs(ref_f).max())
    np.testing.assert_allclose(bridge.energies_kjmol(frames), ref_e, rtol=1e-5)
    np.testing.assert_allclose(bridge.energies_kjmol(frames), md_frames[1][::10][:300], rtol=1e-5, atol=1e-6)
    u, f = bridge.reduced_energies_forces(frames)
    np.testing.assert_allclose(u, ref_e / kT(600.0), rtol=1e-12)
    np.testing.assert_allclose(f, ref_f / kT(600.0), rtol=1e-5, atol=1e-6 * np.abs(ref_f).max())


def test_autograd_gradient_is_minus_force_over_kT(bridge, frames):
    x = torch.from_numpy(frames[:40].reshape(40, 66).copy()).requires_grad_(True)
    u = bridge.reduced_energy(x)
    weights = torch.linspace(0.5, 2.0, 40, dtype=torch.float64)
    (weights * u).sum().backward()
    _, forces = bridge.reduced_energies_forces(frames[:40])
    np.testing.assert_allclose(
        x.grad.numpy(), -weights.numpy()[:, None] * forces.reshape(40, 66), rtol=1e-10, atol=1e-10
    )
    # The sign and scale of the force really are the derivative of u: central differences on a few coordinates.
    h = 1e-6
    for k in (0, 17, 45):
        plus, minus = frames[:1].copy(), frames[:1].copy()
        plus.reshape(66)[k] += h
        minus.reshape(66)[k] -= h
        numeric = (bridge.reduced_energies_forces(plus)[0][0] - bridge.reduced_energies_forces(minus)[0][0]) / (2 * h)
        assert numeric == pytest.approx(-forces[0].reshape(66)[k], rel=1e-4, abs=1e-3)


def test_units_are_kT_at_the_given_temperature(bridge, molecule, frames):
    assert bridge.temperature == 600.0 and bridge.kT == pytest.approx(kT(600.0))
    with OpenMMEnergy(molecule.system_xml(), 300.0, n_workers=1) as cold:
        assert cold.kT == pytest.approx(kT(300.0))
        x = torch.from_numpy(frames[:20].copy())
        np.testing.assert_allclose(cold.reduced_energy(x).numpy(), 2.0 * bridge.reduced_energy(x).numpy(), rtol=1e-12)
        np.testing.assert_allclose(
            bridge.reduced_energy(x).numpy() * kT(600.0), bridge.energies_kjmol(frames[:20]), rtol=1e-12
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("flat", [True, False])
def test_shapes_dtypes_and_order(bridge, frames, dtype, flat):
    batch = np.concatenate([frames, frames[:300]])  # 600 frames: several chunks per worker
    x = torch.as_tensor(batch.reshape(600, 66) if flat else batch, dtype=dtype)
    u = bridge.reduced_energy(x)
    assert u.shape == (600,) and u.dtype == dtype and u.device == x.device
    expected = bridge.energies_kjmol(x.double().numpy()) / bridge.kT
    np.testing.assert_allclose(u.double().numpy(), expected, rtol=1e-6 if dtype == torch.float32 else 1e-12)
    perm = torch.randperm(600, generator=torch.Generator().manual_seed(0))
    np.testing.assert_array_equal(bridge.reduced_energy(x[perm]).numpy(), u[perm].numpy())
    xg = x.clone().requires_grad_(True)
    bridge.reduced_energy(xg).sum().backward()
    assert xg.grad.shape == x.shape and xg.grad.dtype == dtype
    assert bridge.reduced_energy(x[:0]).shape == (0,)


def test_bad_coordinates_give_inf_energy_and_zero_gradient(bridge, frames):
    x = np.repeat(frames[:1], 6, axis=0)
    x[0, 3, 1] = np.nan
    x[1, 7, 0] = np.inf
    x[2, 5] = x[2, 4]  # two atoms on top of each other
    x[3, :] = 0.0  # all atoms at one point
    x[4, 9, 2] = 1e30
    n_before = bridge.n_nonfinite
    xt = torch.from_numpy(x).requires_grad_(True)
    u = bridge.reduced_energy(xt)
    assert torch.isposinf(u[:5]).all() and torch.isfinite(u[5])
    assert bridge.last_nonfinite == 5 and bridge.n_nonfinite == n_before + 5
    bridge.regularized_reduced_energy(xt).sum().backward()
    assert torch.isfinite(xt.grad).all()
    assert (xt.grad[:5] == 0).all() and (xt.grad[5] != 0).any()
    assert (bridge.reduced_energies_forces(x)[1][:5] == 0).all()


def test_regularize_energy_is_continuous_monotone_and_clamped():
    high, top = 1e3, 1e9
    u = torch.cat(
        [
            torch.linspace(-50.0, 5e3, 20001, dtype=torch.float64),
            torch.tensor([1e30, float("inf"), float("nan")], dtype=torch.float64),
        ]
    )
    u.requires_grad_(True)
    r = regularize_energy(u, high=high, max=top)
    finite = r[:-3].detach()
    assert torch.all(finite[1:] >= finite[:-1])  # monotone
    assert torch.max(finite[1:] - finite[:-1]) <= 5050.0 / 20000 + 1e-9  # no jump (slope <= 1)
    eps = torch.tensor([high - 1e-9, high + 1e-9], dtype=torch.float64)
    assert torch.allclose(regularize_energy(eps), eps, atol=1e-8)  # continuous at `high`
    assert torch.equal(r[:-3][u[:-3] <= high], u[:-3][u[:-3] <= high])  # linear below high
    assert r[-3].item() == pytest.approx(high + np.log1p(1e30 - high))
    assert r[-2].item() == top and r[-1].item() == top
    assert regularize_energy(torch.tensor([2e9]), high=10.0, max=20.0).item() == 20.0
    r.sum().backward()
    assert torch.isfinite(u.grad).all() and u.grad[-2] == 0 and u.grad[-1] == 0
    with pytest.raises(InputError):
        regularize_energy(u, high=10.0, max=5.0)


def test_bad_arguments_raise_input_error(bridge, molecule):
    with pytest.raises(InputError):
        bridge.reduced_energy(torch.zeros(4, 65))
    with pytest.raises(InputError, match="energies_kjmol"):  # numpy goes to the numpy methods
        bridge.reduced_energy(np.zeros((4, 22, 3)))
    with pytest.raises(InputError):
        bridge.energies_kjmol(np.zeros((4, 21, 3)))
    with pytest.raises(InputError):
        OpenMMEnergy("<not xml", 600.0)
    with pytest.raises(InputError):
        OpenMMEnergy(molecule.system, -1.0)
    with pytest.raises(InputError):
        OpenMMEnergy(molecule.system, 600.0, n_workers=0)


def test_public_methods_name_what_they_take_and_return(bridge):
    """numpy: plural `energies...` in kJ/mol (`_kjmol`) or kT (`reduced_`); torch: singular `..._energy` in kT."""
    public = {name for name in vars(OpenMMEnergy) if not name.startswith("_") and callable(getattr(OpenMMEnergy, name))}
    assert public == {
        "energies_kjmol",
        "energies_forces_kjmol",
        "reduced_energies_forces",
        "reduced_energy",
        "regularized_reduced_energy",
        "close",
    }
    assert not callable(bridge)  # `energy(x)` would not say kT or kJ/mol


def test_workers_do_not_import_torch(bridge):
    for pid in bridge.worker_pids:
        maps = Path(f"/proc/{pid}/maps").read_text()
        assert "libtorch" not in maps and "libOpenMM" in maps


def test_close_leaves_no_child_process(molecule, frames):
    energy = OpenMMEnergy(molecule.system, 600.0, n_workers=2)
    pids = energy.worker_pids
    assert len(pids) == 2 and not any(gone(pid) for pid in pids)
    energy.close()
    assert all(gone(pid) for pid in pids)
    with pytest.raises(Bgp4Error):
        energy.energies_kjmol(frames[:2])
    energy.close()  # idempotent


@pytest.mark.slow
def test_killed_worker_is_replaced(molecule, frames):
    with OpenMMEnergy(molecule.system, 600.0, n_workers=2) as energy:
        expected = energy.energies_kjmol(frames)
        victim = energy.worker_pids[0]
        os.kill(victim, signal.SIGKILL)
        assert wait_gone([victim])
        np.testing.assert_array_equal(energy.energies_kjmol(frames), expected)
        assert victim not in energy.worker_pids and len(energy.worker_pids) == 2


def die_mid_request(worker, frames, want_forces):
    """Stand-in for Worker.send: only the header goes out, then the worker is killed (it cannot have replied)."""
    worker._write(_energy_pool.HEADER.pack(len(frames), int(want_forces)))
    worker.proc.kill()
    worker.proc.wait()


@pytest.mark.slow
def test_worker_dying_mid_request_is_retried(molecule, frames, monkeypatch):
    real_send, deaths = _energy_pool.Worker.send, []

    def die_once(worker, chunk, want_forces):
        if not deaths:
            deaths.append(worker.pid)
            return die_mid_request(worker, chunk, want_forces)
        return real_send(worker, chunk, want_forces)

    with OpenMMEnergy(molecule.system, 600.0, n_workers=2) as energy:
        expected = energy.energies_forces_kjmol(frames)
        monkeypatch.setattr(_energy_pool.Worker, "send", die_once)
        got = energy.energies_forces_kjmol(frames)
        assert len(deaths) == 1 and deaths[0] not in energy.worker_pids and len(energy.worker_pids) == 2
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])


@pytest.mark.slow
def test_worker_dying_twice_raises_bgp4_error(molecule, frames, monkeypatch):
    with OpenMMEnergy(molecule.system, 600.0, n_workers=1) as energy:
        monkeypatch.setattr(_energy_pool.Worker, "send", die_mid_request)
        with pytest.raises(Bgp4Error, match="died twice"):
            energy.energies_kjmol(frames[:10])
        monkeypatch.undo()
        assert np.isfinite(energy.energies_kjmol(frames[:10])).all()  # recovers on the next call


CHILD = textwrap.dedent(
    """
    import signal, sys, time
    # a shell's background job inherits SIGINT ignored; a user's Ctrl-C target never is
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from bgp4.simulation.energy import OpenMMEnergy
    from bgp4.simulation.molecule import alanine_dipeptide
    energy = OpenMMEnergy(alanine_dipeptide().system, 600.0, n_workers=2)
    print(*energy.worker_pids, flush=True)
    time.sleep(60)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_workers_do_not_outlive_a_killed_parent(sig):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        pids = [int(p) for p in child.stdout.readline().split()]
        assert len(pids) == 2 and not any(gone(pid) for pid in pids)
        child.send_signal(sig)
        child.wait(timeout=10)
        assert wait_gone(pids), f"workers {pids} outlived their parent"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()


def test_md_energies_are_the_files_own_or_evaluated_where_it_stores_none(md_file):
    from bgp4.simulation.data import load_trajectory

    data = load_trajectory(md_file)
    xyz, stored = data.xyz[:200], data.energies[:200]
    system, temperature = data.molecule().system, data.settings["temperature"]
    assert md_energies_kjmol(xyz, stored, system, temperature) is stored  # nothing evaluated
    evaluated = md_energies_kjmol(xyz, np.full(200, np.nan), system, temperature, workers=1)  # a plain mdtraj file
    # the file stores float32 frames and energies: the same energies within float32 rounding
    np.testing.assert_allclose(evaluated, stored, rtol=0, atol=0.05)
