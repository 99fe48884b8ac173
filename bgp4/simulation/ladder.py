"""The temperature ladder of replica exchange: parsing, checks, the record and exchange rates.

Kept apart from `bgp4.simulation.remd` (which runs openmmtools) so that `MDSettings.resolved`
and the CLI check a `--replica-exchange TMIN:TMAX:N` request without importing OpenMM.
Temperatures in K.

>>> " ".join(f"{t:.0f}" for t in temperature_ladder("300:600:4"))
'300 378 476 600'
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from importlib import metadata
from typing import Any

import numpy as np

from bgp4.errors import InputError

__all__ = [
    "MIXING",
    "ADVISED_ITERATION_PS",
    "WARN_ITERATION_PS",
    "temperature_ladder",
    "check_replica_exchange",
    "short_iteration_warning",
    "remd_record",
    "VELOCITY_REFRESH",
    "REFRESH_DEFAULT",
    "velocity_refresh_of",
    "exchange_acceptance",
]

MIXING = "swap-neighbors"  # pure Python, so numpy's seeded global state draws it (swap-all runs in numba)
ADVISED_ITERATION_PS = 0.5  # ps of MD per iteration that keep the velocity redraws from slowing barrier crossing
WARN_ITERATION_PS = 0.1  # ps per iteration below which a run warns (the default 10 steps of 1 fs is 0.01)
_OPTION = "replica_exchange (--replica-exchange)"


def temperature_ladder(spec: str) -> list[float]:
    """The temperatures (K) of "TMIN:TMAX:N": N of them, geometric from TMIN to TMAX (the spacing
    that gives neighbours about equal exchange rates when the heat capacity is constant)."""
    parts = str(spec).split(":")
    try:
        if len(parts) != 3:
            raise ValueError
        tmin, tmax, n = float(parts[0]), float(parts[1]), int(parts[2])
    except ValueError:
        raise InputError(f"{_OPTION} must be TMIN:TMAX:N (K, K, temperatures), e.g. 300:600:8; got {spec!r}") from None
    if not (math.isfinite(tmin) and math.isfinite(tmax) and tmin > 0):
        raise InputError(f"{_OPTION} {spec}: temperatures must be positive and finite (K)")
    if n < 2:
        raise InputError(f"{_OPTION} {spec}: N must be at least 2 temperatures, got {n}")
    if not tmax > tmin:
        raise InputError(f"{_OPTION} {spec}: the ladder must increase, TMAX ({tmax:g} K) above TMIN ({tmin:g} K)")
    ladder = np.geomspace(tmin, tmax, n)
    ladder[0], ladder[-1] = tmin, tmax  # exactly the temperatures asked for
    return [float(t) for t in ladder]


def _number(x: float) -> str:
    """`x` written short where that is exact (300, not 300.0)."""
    short = f"{x:g}"
    return short if float(short) == x else repr(x)


#: When walkers get new velocities (`bgp4.simulation._remd_move.SeededLangevinMove`): "iteration"
#: before every propagation (every walker, every iteration); "exchange" only when it comes from
#: another temperature (or its origin is unknown): a walker that stays continues its trajectory.
VELOCITY_REFRESH = ("iteration", "exchange")
#: The refresh of records written before the option, and the default.
REFRESH_DEFAULT = VELOCITY_REFRESH[0]


def velocity_refresh_of(record: Mapping[str, Any]) -> str:
    """The velocity refresh a replica-exchange settings record asks for (REFRESH_DEFAULT if older)."""
    return str(record.get("velocity_refresh", REFRESH_DEFAULT))


def check_replica_exchange(spec: str, temperature: float, replicas: int, refresh: str = REFRESH_DEFAULT) -> str:
    """The ladder `spec` in canonical form ("300:600:8"; "" for plain MD), after checking it with
    the other MD settings: its lowest temperature must be `temperature` (K), `replicas` must be left
    at 0, and `refresh` is one of VELOCITY_REFRESH ("iteration" only for plain MD). Raises
    InputError naming the options."""
    if refresh not in VELOCITY_REFRESH:
        raise InputError(f"velocity_refresh (--velocity-refresh) must be iteration or exchange, got {refresh!r}")
    if refresh != REFRESH_DEFAULT and not spec:
        raise InputError(f"velocity_refresh (--velocity-refresh) {refresh} is for replica exchange: add {_OPTION}")
    if not spec:
        return ""
    ladder = temperature_ladder(spec)
    if replicas:
        raise InputError(
            f"{_OPTION} runs one walker per temperature in one process; leave out replicas (--replicas), got {replicas}"
        )
    if ladder[0] != float(temperature):
        raise InputError(
            f"{_OPTION} starts at {ladder[0]:g} K, but temperature (--temperature) is {float(temperature):g} K: the "
            f"lowest temperature is the one whose frames are kept, so it must be the one asked for; pass "
            f"--temperature {_number(ladder[0])}"
        )
    return f"{_number(ladder[0])}:{_number(ladder[-1])}:{len(ladder)}"


def short_iteration_warning(save_every: int, timestep_fs: float) -> str | None:
    """A one-line warning when an iteration (`save_every` steps of `timestep_fs` fs) is shorter than
    WARN_ITERATION_PS: the velocities drawn anew at every iteration then damp the dynamics hard."""
    iteration_ps = save_every * timestep_fs / 1000.0
    if iteration_ps >= WARN_ITERATION_PS:
        return None
    advised = math.ceil(ADVISED_ITERATION_PS * 1000.0 / timestep_fs)
    return (
        f"warning: replica exchange redraws velocities every iteration, and {save_every} steps of {timestep_fs:g} fs "
        f"is {iteration_ps:g} ps: a strong thermostat that slows barrier crossing; prefer "
        f">= {ADVISED_ITERATION_PS:g} ps per iteration (--save-every {advised})"
    )


def remd_record(spec: str, refresh: str = REFRESH_DEFAULT) -> dict[str, Any]:
    """What the settings record of a replica-exchange run adds to plain MD's: the method, its
    ladder and when velocities are drawn anew (`refresh`: "iteration" or "exchange")."""
    try:
        version = metadata.version("openmmtools")
    except metadata.PackageNotFoundError:
        version = None
    return {
        "method": "replica-exchange",
        "sampler": "openmmtools.multistate.ParallelTemperingSampler",
        "mixing": MIXING,
        "move": "bgp4.simulation._remd_move.SeededLangevinMove (LangevinMiddleIntegrator, velocities drawn anew "
        + ("each iteration" if refresh == "iteration" else "only for a walker that changed temperature")
        + " as a full refresh of its friction step, the old ones scaled to the new temperature first)",
        "temperatures": temperature_ladder(spec),
        "openmmtools_version": version,
    }


def exchange_acceptance(accepted: np.ndarray, proposed: np.ndarray) -> list[float | None]:
    """Acceptance rate of exchanges between neighbouring temperatures i and i+1 from openmmtools'
    mixing statistics (accepted and proposed counts, (n_states, n_states), summed over iterations);
    None for a pair never proposed."""
    n = accepted.shape[0]
    return [float(accepted[i, i + 1] / proposed[i, i + 1]) if proposed[i, i + 1] else None for i in range(n - 1)]
