"""Replica exchange (parallel tempering) with openmmtools' multistate samplers, resumable at any moment.

`bgp4 simulate --replica-exchange TMIN:TMAX:N` runs N copies of the molecule ("walkers"), one at
each temperature of a geometric ladder from TMIN (the `--temperature` asked for) to TMAX, in one
process. openmmtools' `ParallelTemperingSampler` does everything: each iteration it attempts
exchanges between neighbouring temperatures (`swap-neighbors`: the pairs (0,1), (2,3), ... or
(1,2), (3,4), ..., at random), then propagates every walker by `--save-every` steps of Langevin
dynamics at its temperature (`SeededLangevinMove`: LangevinMiddleIntegrator, fresh velocities at
each iteration, or after an exchange only), then stores positions, reduced energies and exchange
statistics in its netCDF storage (`MultiStateReporter`). The data file holds the lowest
temperature's frame of every iteration: `--frames` iterations, one frame each, `--save-every`
steps apart.

Iteration length. With `--velocity-refresh iteration` (the default) every walker gets fresh
velocities at every iteration (`SeededLangevinMove` says how), which leaves plain MD's distribution
but thermostats far more strongly than the friction when iterations are short: prefer at least
ADVISED_ITERATION_PS (0.5 ps, `--save-every 500` at 1 fs); under WARN_ITERATION_PS (0.1 ps) a run
warns. With `--velocity-refresh exchange` only a walker that changed temperature is refreshed, so
iterations may be short (a frame every 0.1 ps).

Resuming. The run lives in `<out>.partial/` beside the settings record, cut into segments of
SEGMENT_ITERATIONS iterations, each an openmmtools storage of its own (`segment-NNNN/`). A
segment is created in a temporary directory and renamed when ready; it is sealed (`done.json`)
once it holds all its iterations, and never written again. The running segment checkpoints every
CHECKPOINT_ITERATIONS iterations. A rerun never writes into a segment that was stopped, since a
netCDF (HDF5) file killed in the middle of a write may open and read well and still fail on the
next write (openmmtools issue 754): it seals that segment at its last checkpoint, read-only, and
the next segment goes on from there, so a stop loses at most CHECKPOINT_ITERATIONS iterations. A
segment that does not read back is made again from the end of the sealed one before it (at most
one segment lost). Ctrl-C or SIGTERM stops between iterations.
A partial run may resume with another `--frames`: a longer one goes on from its last segment (every
segment ends on a checkpoint), a shorter one keeps the first iterations it asked for.

Seeds. openmmtools' exchanges and `SeededLangevinMove`'s integrator and velocity seeds draw from
numpy's global random state, seeded here from `--seed` and the iteration a run starts at (the
caller's state is given back afterwards). An uninterrupted run is reproducible bit for bit on one
platform; a resumed one goes on from a checkpoint (float32 positions) with the streams seeded
anew: a valid continuation, not the frames an uninterrupted run would give.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from bgp4._io import atomic_write
from bgp4._stop import StopRequest
from bgp4.errors import Bgp4Error, InputError
from bgp4.simulation import _remd_segments as segments
from bgp4.simulation.ladder import (
    MIXING,
    REFRESH_DEFAULT,
    exchange_acceptance,
    short_iteration_warning,
    velocity_refresh_of,
)
from bgp4.stage import Stage

__all__ = ["run_replica_exchange"]

# Lazy, inside the functions that need them: openmm, openmmtools (a second to import, with numba
# and pymbar), bgp4.platform, bgp4.simulation.molecule and bgp4.simulation.data. `MDSettings.resolved`
# imports bgp4.simulation.ladder (the ladder, its checks and the record) and stays free of them too.


# -- the run ------------------------------------------------------------------------------------


@contextlib.contextmanager
def _openmmtools_quietly() -> Iterator[None]:
    """openmmtools and pymbar log warnings ("the API is experimental", "JAX not found") and print
    citations on stdout; a run shows its progress bar only. numpy's global random state (which
    the run seeds) is given back to the caller afterwards."""
    for name in ("openmmtools", "pymbar", "mpiplus"):
        logging.getLogger(name).setLevel(logging.ERROR)
    state = np.random.get_state()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        np.random.set_state(state)


def _reseed(seed: int, phase: int, iteration: int) -> None:
    """Seed numpy's global state, which openmmtools' mixing and SeededLangevinMove draw from."""
    np.random.seed(np.random.SeedSequence([seed, phase, iteration]).generate_state(1)[0])


def _use_platform(sampler, platform: str) -> None:
    """Give the sampler context caches on the run's OpenMM platform (openmmtools' global cache
    would pick the fastest one it finds; a resumed sampler starts with that global cache again)."""
    from openmmtools import cache

    from bgp4.platform import get_platform

    chosen, properties = get_platform(platform)
    for name in ("energy_context_cache", "sampler_context_cache"):
        setattr(sampler, name, cache.ContextCache(platform=chosen, platform_properties=properties or None))


def _make_segment(work: Path, k: int, start: int, iterations: int, record: Mapping[str, Any], molecule) -> None:
    """Create segment `k` (global iterations start..start + iterations) in a temporary directory
    and rename it into place: the first from the minimized and equilibrated structure, the others
    from the last iteration of segment k - 1 (positions, and which walker is at which temperature)."""
    from openmm import unit
    from openmmtools import states
    from openmmtools.multistate import ParallelTemperingSampler

    from bgp4.simulation._remd_move import SeededLangevinMove

    tmp = work / (segments.SEGMENT.format(k) + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    temperatures = [t * unit.kelvin for t in record["temperatures"]]
    move = SeededLangevinMove(
        timestep=record["timestep_fs"] * unit.femtosecond,
        collision_rate=record["friction"] / unit.picosecond,
        n_steps=int(record["save_every"]),
        refresh=velocity_refresh_of(record),
    )
    sampler = ParallelTemperingSampler(
        mcmc_moves=move, number_of_iterations=iterations, online_analysis_interval=None, replica_mixing_scheme=MIXING
    )
    _use_platform(sampler, record["platform"])
    walkers, where = _start_of(work, k, molecule)
    reporter = segments.reporter(tmp, molecule.n_atoms)
    try:
        sampler.create(
            states.ThermodynamicState(molecule.system, temperatures[0]),
            walkers,
            reporter,
            temperatures=temperatures,
            n_temperatures=len(temperatures),  # openmmtools needs it beside explicit temperatures
            initial_thermodynamic_states=where,
        )
        if k == 0:
            _reseed(int(record["seed"]), 0, 0)
            sampler.minimize()
            steps = record["equilibration_ps"] * 1000.0 / record["timestep_fs"]
            equilibration = int(round(steps / record["save_every"]))
            if equilibration:
                sampler.equilibrate(equilibration)  # with exchanges
        _store_start(sampler)
    finally:
        reporter.close()
    atomic_write(tmp / segments.SEGMENT_INFO, json.dumps({"start": start, "iterations": iterations}))
    os.rename(tmp, segments.path(work, k))


def _store_start(sampler) -> None:
    """Store the sampler's state as iteration 0, the state `from_storage` resumes from.

    openmmtools' `equilibrate` stores only the positions, so the storage would keep `create`'s
    temperature assignment (the identity) beside the equilibrated positions; and `create` stores a
    zero energy matrix, with which the first exchanges of every segment would all be accepted.
    Here the energies of the current positions are computed and iteration 0 is written again whole
    (positions, which walker is at which temperature, energies); openmmtools has no public call for it.
    """
    sampler._compute_energies()
    sampler._report_iteration()


def _start_of(work: Path, k: int, molecule) -> tuple[list, list[int] | None]:
    """The walkers' sampler states a segment starts from, and the temperature index of each."""
    from openmmtools import states

    if k == 0:
        return [states.SamplerState(molecule.positions)], None
    previous = segments.path(work, k - 1)
    last = json.loads((previous / segments.SEGMENT_INFO).read_text())["iterations"]
    reporter = segments.reporter(previous, molecule.n_atoms, mode="r")
    try:
        walkers = reporter.read_sampler_states(last)
        where = [int(i) for i in reporter.read_replica_thermodynamic_states(last)]
    finally:
        reporter.close()
    if walkers is None:
        raise Bgp4Error(f"{previous} holds no checkpoint at its last iteration {last}; remove {work} to start over")
    return walkers, where


def _open(directory: Path, record: Mapping[str, Any], n_atoms: int):
    """(sampler, reporter) of a segment at its last checkpoint (`from_storage`): iteration 0 of
    one just made, which is the only kind a run writes into."""
    from openmmtools.multistate import ParallelTemperingSampler

    reporter = segments.reporter(directory, n_atoms)
    try:
        sampler = ParallelTemperingSampler.from_storage(reporter)
    except Exception as exc:
        reporter.close()
        raise Bgp4Error(f"openmmtools cannot open the storage it just wrote in {directory}: {exc}") from exc
    _use_platform(sampler, record["platform"])
    return sampler, reporter


def _note_temperatures(sampler) -> None:
    """Give each walker the note of the temperature it was last propagated at (the stored
    assignment of the sampler's iteration), which the storage does not keep: the first iteration
    after opening a segment then treats exchanged walkers as an unbroken run does. Not for the
    first segment's iteration 0: openmmtools' `equilibrate` mixes after propagating, so that
    assignment is not where the walkers ran (and without equilibration their velocities are the
    minimizer's zeros); there every walker is refreshed."""
    from openmm import unit

    from bgp4.simulation._remd_move import note_temperature

    for walker, state in zip(sampler._sampler_states, sampler._replica_thermodynamic_states):
        kelvin = sampler._thermodynamic_states[int(state)].temperature.value_in_unit(unit.kelvin)
        note_temperature(walker, kelvin)


def _advance(sampler, bar, stop: StopRequest | None = None) -> None:
    """Run the sampler to the end of its segment, one iteration at a time (the progress bar moves).
    A stop request (Ctrl-C, SIGTERM) ends it between iterations, as KeyboardInterrupt."""
    while sampler.iteration < sampler.number_of_iterations:
        sampler.run(1)
        if bar.n < bar.total:  # a last segment rounded up to a checkpoint runs past --frames
            bar.update(1)
        if stop is not None and stop.requested:
            raise KeyboardInterrupt


def _run_segments(work: Path, record: Mapping[str, Any], molecule, bar, stop: StopRequest | None = None) -> None:
    """Seal a stopped segment at its last checkpoint, make and run new ones, until the sealed
    segments hold `frames` iterations in all."""
    from openmmtools.multistate.utils import SimulationNaNError

    frames, seed = int(record["frames"]), int(record["seed"])
    while (start := segments.held(sealed := segments.sealed(work))) < frames:
        k = len(sealed)
        directory = segments.path(work, k)
        if directory.exists() and (kept := segments.seal_at_checkpoint(directory, molecule.n_atoms)):
            bar.update(min(kept, frames - start))
            continue
        shutil.rmtree(directory, ignore_errors=True)
        _make_segment(work, k, start, segments.size(frames - start), record, molecule)
        sampler, reporter = _open(directory, record, molecule.n_atoms)
        if k:
            _note_temperatures(sampler)
        _reseed(seed, 1, start)
        try:
            _advance(sampler, bar, stop)
        except SimulationNaNError as exc:
            raise Bgp4Error(f"replica exchange failed: {exc}; rerun to resume from the last checkpoint") from None
        finally:
            reporter.close()
        atomic_write(directory / segments.DONE, json.dumps({"iterations": sampler.iteration}))


def run_replica_exchange(out: str | os.PathLike, work: str | os.PathLike, progress: bool = True) -> None:
    """Run (or resume) the replica exchange recorded in the work directory `work` (its settings
    record, written by `bgp4.simulation.md.simulate`), then write the lowest temperature's frames
    to `out` (see `bgp4.simulation.md.simulate`; the work directory stays for the caller to remove).

    Raises Bgp4Error when openmmtools fails (a NaN energy: lower --timestep-fs).
    """
    from tqdm.auto import tqdm

    from bgp4.simulation.molecule import molecule_of

    work = Path(work)
    record = Stage(work).recorded()
    if record is None or not record.get("replica_exchange"):
        raise InputError(f"{work} holds no replica-exchange settings record")
    molecule = molecule_of(record, source=work)
    refreshes_all = velocity_refresh_of(record) == REFRESH_DEFAULT
    if refreshes_all and (warning := short_iteration_warning(int(record["save_every"]), float(record["timestep_fs"]))):
        print(warning, file=sys.stderr)
    done = min(segments.held(segments.sealed(work)), int(record["frames"]))  # a shortened run may hold more
    bar = tqdm(total=int(record["frames"]), initial=done, unit="frame", desc="replica exchange", disable=not progress)
    # openmmtools defers a signal that comes mid-write and then calls the handler it replaced: a
    # Python one, since SIG_DFL (SIGTERM's) is not callable there (mpiplus).
    stop = StopRequest()
    try:
        with _openmmtools_quietly():
            _run_segments(work, record, molecule, bar, stop)
    finally:
        stop.restore()
        bar.close()
    _write(Path(out), work, record, molecule)


# -- the data file ------------------------------------------------------------------------------


def _write(out: Path, work: Path, record: Mapping[str, Any], molecule) -> None:
    """The data file: the lowest temperature's frame of every iteration, segment after segment,
    with the run's settings record, its exchange rates and a `walker` array."""
    from bgp4.simulation.data import write_trajectory

    sealed, frames = segments.sealed(work), int(record["frames"])
    kT = molecule.kT(record["temperatures"][0])
    # the first `frames` iterations: a run shortened after it had run further holds more
    keep = [min(int(info["iterations"]), frames - info["start"]) for info in sealed if info["start"] < frames]
    parts = [
        segments.read_frames(segments.path(work, k), sealed[k], n, molecule.n_atoms, kT) for k, n in enumerate(keep)
    ]
    accepted = sum(p["accepted"] for p in parts)
    proposed = sum(p["proposed"] for p in parts)
    frame_ps = record["save_every"] * record["timestep_fs"] / 1000.0
    final = {
        **record,
        "iterations": frames,
        "steps_per_iteration": int(record["save_every"]),
        "exchange_acceptance": exchange_acceptance(accepted, proposed),
        "exchange_attempts": [int(proposed[i, i + 1]) for i in range(proposed.shape[0] - 1)],
    }

    def chunks():
        for info, part in zip(sealed, parts):
            iteration = info["start"] + np.arange(1, len(part["epot"]) + 1)
            yield {
                "coordinates": part["xyz"],
                "time": (iteration * frame_ps).astype(np.float32),
                "potentialEnergy": part["epot"].astype(np.float32),
            }

    walker = np.concatenate([p["walker"] for p in parts]).astype(np.int16)
    # `replica`: one time series (the lowest temperature's), for the block errors of `bgp4 analyze`
    extras = {"replica": np.zeros_like(walker), "walker": walker}
    write_trajectory(out, molecule.topology, chunks(), final, extras=extras)
