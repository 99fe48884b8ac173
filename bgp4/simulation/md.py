"""Langevin MD of the molecule in independent replica processes, resumable at any moment.

Each replica runs in its own process from the minimized structure with its own seed and its own
equilibration, and appends frames (positions nm, potential and kinetic energy kJ/mol) to a raw
record file in `<out>.partial/`. Every few thousand frames it fsyncs the records and then replaces
an OpenMM checkpoint that names how many records are committed; a replica restarted after a kill
truncates its records to that count and continues from the checkpoint, so no frame is lost or
duplicated. When every replica is done the records become one mdtraj HDF5 file.

The replicas run as `python -m bgp4.simulation._md_worker` processes (not multiprocessing's spawn,
which re-runs the caller's `__main__`), so a script that calls `simulate` needs no `__main__` guard.

With `replica_exchange` ("TMIN:TMAX:N") the run is replica exchange instead, with openmmtools, in
this process (`bgp4.simulation.remd`): the same work directory, settings record and resume rules.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bgp4._child import python_command
from bgp4._io import check_output_file, check_output_name
from bgp4.errors import Bgp4Error, InputError, refuse_non_finite
from bgp4.simulation._records import FRAMES_FILE, committed, record_dtype
from bgp4.simulation.system import SystemSpec
from bgp4.stage import Stage, changed, refuse_changes

if TYPE_CHECKING:
    from bgp4.simulation.molecule import Molecule

__all__ = [
    "AUTO_TIMESTEP_FS",
    "MDSettings",
    "completed",
    "data_path",
    "simulate",
]

# Lazy, inside the functions that need them: openmm, bgp4.platform (OpenMM), bgp4.simulation.molecule and
# bgp4.simulation.data (OpenMM, mdtraj). The CLI imports this module at its start (MDSettings gives its
# defaults), as does each replica process (bgp4.simulation._md_worker), and both stay free of them.

#: Time step (fs) when none is given: 2 fs with X-H bonds constrained, 1 fs with every bond free
#: (an X-H stretch has a period of about 10 fs; 2 fs would heat and break it).
AUTO_TIMESTEP_FS = {"hbonds": 2.0, "none": 1.0}


@dataclass(frozen=True)
class MDSettings:
    """The MD protocol. Defaults are the paper's 600 K data set (REFERENCE section 2)."""

    frames: int = 500_000
    temperature: float = 600.0  # K
    timestep_fs: float = 0.0  # 0: the step that suits the constraints (AUTO_TIMESTEP_FS)
    save_every: int = 10  # steps between saved frames
    friction: float = 1.0  # 1/ps
    equilibration_ps: float = 100.0
    replicas: int = 0  # 0: one per core
    seed: int = 0
    platform: str = "auto"
    molecule: str = ""  # a name registered in bgp4.simulation.molecule.MOLECULES; "": the default molecule
    pdb: str = ""  # a structure file to simulate instead of a named molecule (bgp4.simulation.molecule.pdb_molecule)
    forcefield: str = "amber99sb-ildn"  # bgp4.simulation.system.FORCE_FIELDS
    solvent: str = "obc"  # obc (implicit water) or vacuum
    constraints: str = "hbonds"  # hbonds (X-H bonds fixed) or none
    replica_exchange: str = ""  # "TMIN:TMAX:N": replica exchange over that ladder (bgp4.simulation.remd); "": plain MD
    velocity_refresh: str = "iteration"  # replica exchange: "iteration" (every walker) or "exchange" (exchanged ones)

    def resolved(self) -> MDSettings:
        """Validated copy with `replicas` and `platform` made concrete; raises InputError."""
        refuse_non_finite(self)
        if self.frames < 1:
            raise InputError(f"frames (--frames) must be at least 1, got {self.frames}")
        if not self.temperature > 0:
            raise InputError(f"temperature (--temperature) must be positive (K), got {self.temperature}")
        spec = SystemSpec(self.forcefield, self.solvent, self.constraints)
        timestep = self.timestep_fs or AUTO_TIMESTEP_FS[spec.constraints]
        if not timestep > 0:
            raise InputError(f"timestep_fs (--timestep-fs) must be positive, got {self.timestep_fs}")
        if timestep > AUTO_TIMESTEP_FS[spec.constraints]:
            bonds = "constrained X-H bonds" if spec.constraints == "hbonds" else "free X-H bonds"
            raise InputError(
                f"timestep_fs (--timestep-fs) {timestep:g} fs is too long for {bonds} (constraints "
                f"{spec.constraints}): use at most {AUTO_TIMESTEP_FS[spec.constraints]:g} fs, or leave it out "
                "for that step"
            )
        if self.save_every < 1:
            raise InputError(f"save_every (--save-every) must be at least 1 step, got {self.save_every}")
        if self.friction < 0:
            raise InputError(f"friction (--friction) must be >= 0 (1/ps), got {self.friction}")
        if self.equilibration_ps < 0:
            raise InputError(f"equilibration_ps (--equilibration-ps) must be >= 0, got {self.equilibration_ps}")
        if self.replicas < 0:
            raise InputError(f"replicas (--replicas) must be >= 1, or 0 for one per core; got {self.replicas}")
        from bgp4.simulation.ladder import check_replica_exchange

        ladder = check_replica_exchange(self.replica_exchange, self.temperature, self.replicas, self.velocity_refresh)
        if self.seed < 0:
            raise InputError(f"seed (--seed) must be >= 0, got {self.seed}")
        from bgp4.simulation.molecule import PDB_PREFIX, molecule_name

        if self.pdb and self.molecule:
            raise InputError("give molecule (--molecule, --sequence) or pdb (--pdb), not both")
        pdb = str(Path(self.pdb).resolve()) if self.pdb else ""
        if pdb and not Path(pdb).is_file():
            raise InputError(f"no structure file at {self.pdb} (--pdb)")
        molecule = f"{PDB_PREFIX}{Path(pdb).stem}" if pdb else molecule_name(self.molecule)
        replicas = self.replicas or os.cpu_count() or 1
        replicas = 0 if ladder else min(replicas, self.frames)  # replica exchange: one walker per temperature
        values = asdict(self) | {
            "replicas": replicas,
            "replica_exchange": ladder,
            "molecule": molecule,
            "pdb": pdb,
            "timestep_fs": float(timestep),
            **{k: getattr(spec, k) for k in ("forcefield", "solvent", "constraints")},
        }
        draft = MDSettings(**values)
        return replace(draft, platform=draft.concrete_platform())

    def concrete_platform(self) -> str:
        """The platform name `resolve_platform` gives; `auto` goes by the molecule's atom count and
        its system's custom forces (`platform_traits`: the molecule is built once a process)."""
        from bgp4.platform import resolve_platform
        from bgp4.simulation.molecule import platform_traits

        if str(self.platform).lower() != "auto":
            return resolve_platform(self.platform)
        return resolve_platform(self.platform, *platform_traits(self.molecule, self.pdb, self.spec()))

    def left_to_bgp4(self) -> tuple[str, ...]:
        """The settings this request leaves to bgp4 (replicas 0: one per core; platform auto: by
        the atom count and custom forces, which older versions chose otherwise): a stored run
        matches any value of them."""
        auto = {"replicas": self.replicas == 0, "platform": str(self.platform).lower() == "auto"}
        return tuple(name for name, left in auto.items() if left)

    def spec(self) -> SystemSpec:
        """The force field, solvent and constraints of the system to simulate."""
        return SystemSpec(self.forcefield, self.solvent, self.constraints)

    def molecule_object(self) -> Molecule:
        """The molecule to simulate (resolved settings): the structure file's, or the named one."""
        from bgp4.simulation.molecule import get_molecule, pdb_molecule

        return pdb_molecule(self.pdb, self.spec()) if self.pdb else get_molecule(self.molecule, self.spec())

    def frames_of(self, replica: int) -> int:
        """Frames assigned to `replica`: an even split, the first ones taking the remainder."""
        return self.frames // self.replicas + (1 if replica < self.frames % self.replicas else 0)

    def seeds(self) -> list[int]:
        """One OpenMM-compatible (positive int32) seed per replica, derived from `seed`."""
        children = np.random.SeedSequence(self.seed).spawn(self.replicas)
        return [int(c.generate_state(1)[0] % (2**31 - 2)) + 1 for c in children]


def _replica_command(work: Path, replica: int, s: MDSettings) -> tuple[list[str], dict[str, str]]:
    """argv and environment of one replica process; it imports this very bgp4 (`bgp4._child`)."""
    return python_command(
        "-m", "bgp4.simulation._md_worker", str(work), str(replica), json.dumps(asdict(s)), str(os.getpid())
    )


def _run_replicas(work: Path, s: MDSettings, done: list[int], bar) -> None:
    """Run every replica in a process of its own until all have exited, moving `bar` (and `done`,
    frames per replica) as their messages come in; raises Bgp4Error naming the replicas that failed.

    On any exception here (Ctrl-C included) the replicas still running are stopped (SIGTERM); what
    they committed stays for a rerun. Messages are described in `bgp4.simulation._md_worker`.
    """
    procs: list[subprocess.Popen] = []
    errors: dict[int, str] = {}
    try:
        for r in range(s.replicas):
            argv, env = _replica_command(work, r, s)
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, close_fds=True))
        streams = {p.stdout.fileno(): (r, b"") for r, p in enumerate(procs)}  # fd -> (replica, unfinished line)
        while streams:
            for fd in select.select(list(streams), [], [])[0]:
                r, pending = streams.pop(fd)
                chunk = os.read(fd, 1 << 16)
                *lines, rest = (pending + chunk).split(b"\n")
                for message in map(json.loads, lines):
                    if "frames" in message:
                        bar.update(message["frames"] - done[r])
                        done[r] = message["frames"]
                    else:
                        errors[r] = str(message.get("error"))
                if chunk:  # b"": the replica closed its end (it exited)
                    streams[fd] = (r, rest)
        for p in procs:
            p.wait()
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait()
            p.stdout.close()
    failed = [r for r, p in enumerate(procs) if p.returncode != 0]
    if failed:
        why = "; ".join(f"replica {r} failed: {errors.get(r) or f'exit code {procs[r].returncode}'}" for r in failed)
        raise Bgp4Error(f"MD {why}; rerun to resume")


def _settings_record(s: MDSettings) -> dict:
    """The record of the run: its settings and the molecule's (`Molecule.record`: system, structure)."""
    import openmm

    record = {
        **asdict(s),
        **s.molecule_object().record(),
        "kind": "md",
        "integrator": "LangevinMiddleIntegrator",
        "nonbonded": "NoCutoff",
        "replica_seeds": s.seeds(),
        "openmm_version": openmm.__version__,
        "units": {"coordinates": "nm", "potentialEnergy": "kJ/mol", "time": "ps"},
    }
    if s.replica_exchange:
        from bgp4.simulation.ladder import remd_record

        del record["replica_seeds"]  # the walkers draw from one seeded stream
        record |= remd_record(s.replica_exchange, s.velocity_refresh)
    return record


def _differing(stored: dict, s: MDSettings, left: tuple[str, ...], resizable: bool = False) -> list[str]:
    """Settings of `s` that `stored` (a settings record) does not share (`bgp4.stage.changed`). The
    settings `left` to bgp4 (`MDSettings.left_to_bgp4`) match any value. With `resizable` the frame
    count may differ too (a partial run resumed longer or shorter)."""
    from bgp4.simulation.ladder import REFRESH_DEFAULT
    from bgp4.simulation.molecule import DEFAULT_MOLECULE

    request = asdict(s)
    # Records of older versions: no molecule, no system but `constraints: HBonds`, no structure file.
    old = {
        "molecule": DEFAULT_MOLECULE,
        "pdb": "",
        "replica_exchange": "",
        "velocity_refresh": REFRESH_DEFAULT,
        **SystemSpec().record(),
    }
    stored = dict(stored) | {"constraints": str(stored.get("constraints", "hbonds")).lower()}
    neutral = [*left, *(["frames"] if resizable else [])]
    return changed(stored, request, keys=request, neutral=neutral, defaults=old)


_REPLACE = "pass overwrite=True (--overwrite) to replace it, or choose another output (another --out)"


def completed(out: str | os.PathLike, settings: MDSettings = MDSettings()) -> bool:
    """Whether `out` holds the finished MD of `settings` (True), or does not exist (False).

    Raises InputError when `out` exists with other settings, or is no bgp4 MD file. A file that
    exists is complete: it is written in one atomic step at the end of `simulate`.
    """
    from bgp4.simulation.data import read_settings

    out = Path(out)
    if not out.exists():
        return False
    check_output_name(out)  # a directory, or another kind of file: --overwrite would not help
    s = settings.resolved()
    try:
        stored = read_settings(out)
    except (OSError, RuntimeError, ValueError):  # not HDF5 (tables raises HDF5ExtError), or bad JSON
        stored = {}
    if stored.get("kind") != "md":
        raise InputError(f"{out} exists and is no `bgp4 simulate` output; {_REPLACE}")
    refuse_changes(f"{out} holds MD", _differing(stored, s, settings.left_to_bgp4()), _REPLACE)
    return True


def _prepare(out: Path, s: MDSettings, overwrite: bool, left: tuple[str, ...]) -> tuple[Path, MDSettings]:
    """Check the output path and the partial directory; returns the work directory and the
    settings to run (a partial run keeps its values of the settings `left` to bgp4)."""
    check_output_file(out)
    work = Stage(out.with_name(out.name + ".partial"))  # its settings record; the finished file is the marker
    if overwrite and work.path.exists():
        shutil.rmtree(work.path)
    previous = work.recorded()
    if previous is not None:
        # each replica's frames (plain MD), or the lowest temperature's (replica exchange), are the
        # start of one run: a partial run goes on to another frame count, longer or shorter
        refuse_changes(
            f"{work.path} holds a partial run",
            _differing(previous, s, left, resizable=True),
            "rerun with its settings to resume, or pass overwrite=True (--overwrite) to discard it",
        )
        # started on a machine with another core count, or by a version that chose another platform
        s = replace(s, **{name: previous[name] for name in left if name in previous})
        if previous.get("frames") != s.frames:
            work.record(previous | {"frames": s.frames})  # replicas past their new share stop; the rest go on
    else:
        record = _settings_record(s)  # builds the molecule: a structure file it refuses leaves nothing behind
        work.path.mkdir(exist_ok=True)
        work.record(record)
    return work.path, s


def simulate(
    out: str | os.PathLike, settings: MDSettings = MDSettings(), overwrite: bool = False, progress: bool = True
) -> Path:
    """Run (or resume) the MD described by `settings` and write the frames to `out` (mdtraj HDF5).
    With `settings.replica_exchange` the run is replica exchange and `out` holds the lowest
    temperature's frames (`bgp4.simulation.remd.run_replica_exchange`).

    A finished file of the same settings is kept as it is (see `completed`); one of other settings
    is replaced only with `overwrite`. Raises InputError for bad settings or paths (nothing on
    disk is touched then) and Bgp4Error if a replica fails.
    """
    from tqdm.auto import tqdm

    out = Path(out)
    s = settings.resolved()
    if not overwrite and completed(out, settings):
        return out
    work, s = _prepare(out, s, overwrite, settings.left_to_bgp4())
    if s.replica_exchange:
        from bgp4.simulation.remd import run_replica_exchange

        run_replica_exchange(out, work, progress)
        shutil.rmtree(work)
        return out
    done = [committed(work, r) for r in range(s.replicas)]
    held = sum(min(d, s.frames_of(r)) for r, d in enumerate(done))  # a shortened run may hold more
    bar = tqdm(total=s.frames, initial=held, unit="frame", desc="simulate", disable=not progress, smoothing=0.1)
    try:
        _run_replicas(work, s, done, bar)
    finally:
        bar.close()
    _assemble(out, work, s)
    shutil.rmtree(work)
    return out


def _assemble(out: Path, work: Path, s: MDSettings) -> None:
    """Join the replicas' records into one mdtraj HDF5 file, replica after replica."""
    from bgp4.simulation.data import write_trajectory
    from bgp4.simulation.molecule import molecule_of

    settings = Stage(work).recorded()
    molecule = molecule_of(settings)
    record = record_dtype(molecule.n_atoms)
    dof = 3 * molecule.n_atoms - molecule.system.getNumConstraints() - 3
    kb = molecule.kT(1.0)
    counts = [s.frames_of(r) for r in range(s.replicas)]

    def chunks():
        for r, count in enumerate(counts):
            records = np.fromfile(work / FRAMES_FILE.format(r), dtype=record, count=count)
            if records.shape[0] != count:
                raise Bgp4Error(f"replica {r} holds {records.shape[0]} frames, expected {count}; rerun to resume")
            yield {
                "coordinates": records["xyz"],
                "time": (np.arange(1, count + 1) * s.save_every * s.timestep_fs / 1000.0).astype(np.float32),
                "potentialEnergy": records["epot"].astype(np.float32),
                "kineticEnergy": records["ekin"].astype(np.float32),
                "temperature": (2.0 * records["ekin"] / (dof * kb)).astype(np.float32),
            }

    replica = np.repeat(np.arange(s.replicas, dtype=np.int16), counts)
    write_trajectory(out, molecule.topology, chunks(), settings, extras={"replica": replica})


def data_path(out: Path, md: MDSettings) -> Path:
    """Where `bgp4 simulate` and the pipeline put MD data under `out` by default: `data/ala2-600K.h5`
    for the default molecule and system (as always), else
    `data/<molecule>[-<forcefield>][-vacuum][-free]-<T>K.h5`: the molecule's registered name (or
    the PDB file's stem), then whatever of the system is not the default."""
    # lazy: building the name list reads the molecule layer, which the CLI need not load to start
    from bgp4.simulation.molecule import DEFAULT_MOLECULE, molecule_name

    spec, default = SystemSpec(md.forcefield, md.solvent, md.constraints), SystemSpec()
    name = Path(md.pdb).stem if md.pdb else molecule_name(md.molecule)
    parts = ["ala2" if name == DEFAULT_MOLECULE and not md.pdb else name.replace(":", "-")]
    parts += [spec.forcefield] if spec.forcefield != default.forcefield else []
    parts += [spec.solvent] if spec.solvent != default.solvent else []
    parts += ["free"] if spec.constraints == "none" else []
    return out / "data" / f"{'-'.join(parts)}-{md.temperature:g}K.h5"
