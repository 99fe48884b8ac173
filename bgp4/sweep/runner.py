"""Sweeps: every (model, seed) pair as one resumable run, executed as a task on Dask distributed.

With several objectives (`objectives`, an axis of the sweep) every (model, objective, seed) is a
run, and the report compares the variants "<model>-<objective>".

Layout of a sweep directory DIR:
`sweep.json` (variants, seeds, data file, settings), `runs/<model>-s<seed>/` or
`runs/<model>-<objective>-s<seed>/` (a `bgp4 train` run directory with `samples.h5`, its own
`report/` from `bgp4 analyze`, `log.txt` and `sweep-done.json`), and `report/` (the aggregate over
seeds, see `bgp4.report.aggregate`).

A run's training is handed to the workers in parts, and a last task samples and analyzes it
(`bgp4.sweep.dispatch`). Every task resumes from what is on disk, so a task that is run again (a
worker died, the sweep command was killed) continues where the last copy stopped. A lock file in
the run directory (`run.lock`, an OS lock the kernel drops when its process dies) keeps two copies
of the same task from writing at once: a copy still running on a worker the scheduler gave up on
is waited for, never raced. A run is finished when its `sweep-done.json` (its stage marker,
`RunSpec.done`) records the settings it was asked for.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from bgp4._io import atomic_write
from bgp4.errors import Bgp4Error, InputError
from bgp4.generator.rundir import check_init
from bgp4.generator.training_data import check_frame_count
from bgp4.report.aggregate import write_sweep_report
from bgp4.settings import (
    RefineSettings,
    SampleSettings,
    TrainSettings,
    changed_settings,
    settings_record,
)
from bgp4.stage import Stage, refuse_changes, with_fingerprint
from bgp4.sweep.checks import check_sweep, data_frames, data_md_settings, objective_axis, run_device
from bgp4.sweep.cluster import check_worker_memory, local_cluster_size, local_memory_limit, open_client
from bgp4.sweep.dispatch import RETRIES, Dispatch
from bgp4.sweep.spec import DONE_FILE, RunSpec, run_name
from bgp4.sweep.tasks import simulate_task

__all__ = ["RunSpec", "SweepPlan", "plan_sweep", "init_runs", "run_sweep", "SWEEP_FILE", "DONE_FILE"]

SWEEP_FILE = "sweep.json"
#: Seconds after the runs are submitted at which the client imports what the report needs.
WARM_UP_AFTER_S = 20


@dataclass(frozen=True)
class SweepPlan:
    """A validated sweep: nothing is written until `run_sweep`."""

    out: Path
    data: Path
    models: tuple[str, ...]  # the variants the report compares: models, or "<model>-<objective>"
    seeds: tuple[int, ...]
    runs: tuple[RunSpec, ...]
    md: dict[str, Any] | None  # MD settings when the data file must be simulated first
    objectives: tuple[str, ...] = ()  # the objective axis: empty when every run has the base's

    def record(self) -> dict[str, Any]:
        varied = ("model", "seed", "objective", "init") if self.objectives else ("model", "seed", "init")
        common = {k: v for k, v in self.runs[0].train.items() if k not in varied}
        return {
            "data": str(self.data),
            "models": list(self.models),
            "seeds": list(self.seeds),
            "train": common,
            "sample": {k: v for k, v in self.runs[0].sample.items() if k != "seed"},
            "refine": self.runs[0].refine,
            "md": self.md,
            "objectives": list(self.objectives),
            "runs": {
                r.name: {
                    "model": r.variant,
                    "kind": r.model,
                    "objective": r.train["objective"],
                    "seed": r.seed,
                    **({"init": r.train["init"]} if r.train.get("init") else {}),
                }
                for r in self.runs
            },
        }


def plan_sweep(
    out: str | Path,
    data: str | Path,
    models: list[str],
    n_seeds: int,
    base: TrainSettings,
    samples: int,
    sample_batch: int = 10_000,
    threads_per_run: int = 1,
    gpus_per_run: float = 0.0,
    md: dict[str, Any] | None = None,
    by_model: dict[str, TrainSettings] | None = None,
    objectives: list[str] | None = None,
    refine: RefineSettings | None = None,
) -> SweepPlan:
    """Check every input and build the runs; raises InputError (and touches nothing) on bad input.

    `base` holds the train settings shared by all runs (its model and seed are replaced per run);
    `by_model` replaces `base` for the models it names (a preset's per-kind sizes); `md` are the
    MD settings used when `data` does not exist yet. `objectives`: with two or more, every model
    trains with each (runs "<model>-<objective>-s<seed>"); one replaces the settings' objective.
    `refine` (levels > 0): every run's samples are refined by AIS too, and the report compares
    "<variant> +AIS(K)" beside each variant. `base.init` (--init) names a finished sweep: each run
    starts from its run of the same model and seed (`init_runs`), e.g. FAB after a likelihood sweep.
    """
    init_sweep = base.init
    base = dataclasses.replace(base, init=None)
    by_model = {m: dataclasses.replace(s, init=None) for m, s in (by_model or {}).items()}
    check_sweep(models, n_seeds, threads_per_run, gpus_per_run)
    axis = objective_axis(objectives)
    out = Path(out).expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise InputError(f"sweep directory {out} is a file")
    data = Path(data).expanduser().resolve()
    md_settings = data_md_settings(data, md, base.temperature)
    n_frames, frames_of = data_frames(data, md_settings)
    base = dataclasses.replace(base, device=run_device(base.device, gpus_per_run))
    seeds = tuple(range(n_seeds))
    if init_sweep and Path(init_sweep).expanduser().resolve() == out:
        raise InputError(f"init (--init) names this sweep's own directory {out} (--out): start from another sweep")
    refine = refine.validated() if refine is not None else None  # bad refinement settings fail here too
    refined = asdict(refine) if refine is not None and refine.levels > 0 else {}
    runs, variants = [], []
    for model in models:
        own = (by_model or {}).get(model, base)
        if own.device == "auto":
            own = dataclasses.replace(own, device=base.device)
        for objective in axis or (objectives or [own.objective]):
            label = f"{model}-{objective}" if axis else ""
            variants.append(label or model)
            for seed in seeds:
                settings = dataclasses.replace(
                    own,
                    data=str(data),
                    model=model,
                    seed=seed,
                    workers=own.workers or threads_per_run,
                    objective=objective,
                )
                check_frame_count(n_frames, settings.validated(), frames_of)  # bad settings: their own message
                if init_sweep:
                    settings = _started_from(init_sweep, out / "runs" / run_name(label or model, seed), settings)
                spec = _run_spec(out, settings, samples, sample_batch, threads_per_run, gpus_per_run, label)
                runs.append(dataclasses.replace(spec, refine=refined))
    return SweepPlan(out, data, tuple(variants), seeds, tuple(runs), md_settings, axis)


def init_runs(init_sweep: str | Path, models: list[str], seeds: tuple[int, ...]) -> dict[tuple[str, int], str]:
    """(model, seed) -> the run directory of the sweep `init_sweep` that the run of that model and
    seed starts from: its run of the same generator kind and seed, the objective ml one where that
    sweep compares objectives. InputError (nothing written) when it is no sweep or lacks a run."""
    sweep = Path(init_sweep).expanduser().resolve()
    what = f"init={init_sweep} (--init)"
    if not (sweep / SWEEP_FILE).is_file():
        raise InputError(
            f"{what}: a sweep starts each run from a sweep directory's run of the same model and seed, "
            f"and {sweep} holds no {SWEEP_FILE}"
        )
    try:
        runs = json.loads((sweep / SWEEP_FILE).read_text()).get("runs") or {}
        # sweeps before the objective axis recorded no kind: their "model" is the kind
        keys = {n: (r.get("kind", r.get("model")), int(r["seed"]), r.get("objective", "")) for n, r in runs.items()}
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise InputError(f"{what}: {sweep / SWEEP_FILE} cannot be read ({type(err).__name__})") from None
    found = {}
    for model in models:
        for seed in seeds:
            mine = [n for n, (kind, s, _) in keys.items() if kind == model and s == seed]
            ml = [n for n in mine if keys[n][2] == "ml"] if len(mine) > 1 else mine
            if len(ml) != 1:
                objectives = ", ".join(sorted(keys[n][2] for n in mine))
                have = f"runs of objectives {objectives}, none ml," if mine else "no run"
                raise InputError(f"{what}: the sweep has {have} for model {model} and seed {seed} to start from")
            found[(model, seed)] = str(sweep / "runs" / ml[0])
    return found


def _started_from(init_sweep: str | Path, path: Path, settings: TrainSettings) -> TrainSettings:
    """`settings` with the init run of the sweep run at `path`: the one it recorded when it began (a
    resumed run looks no further: the init sweep may have moved on since), else `init_runs`' pick,
    checked as `bgp4 train --init` checks it."""
    sweep = Path(init_sweep).expanduser().resolve()
    stored = (Stage(path).recorded() or {}).get("init")
    if stored:
        if Path(stored).parent.parent != sweep:
            raise InputError(
                f"{path} holds a run started from {stored}, not from the sweep {sweep} (--init); "
                "use another sweep directory (--out)"
            )
        return dataclasses.replace(settings, init=stored)
    init = init_runs(sweep, [settings.model], (settings.seed,))[(settings.model, settings.seed)]
    settings = dataclasses.replace(settings, init=init)
    check_init(init, settings_record(settings.validated()), data=settings.has_data)
    return settings


def _run_spec(
    out: Path, settings: TrainSettings, samples: int, sample_batch: int, threads: int, gpus: float, label: str = ""
) -> RunSpec:
    """The run of one (model, seed), or of one (model, objective, seed) with its `label`, in the
    sweep directory `out`."""
    train = json.loads(json.dumps(asdict(settings.validated())))
    sample = asdict(
        SampleSettings(
            n=samples, batch=sample_batch, device=settings.device, seed=settings.seed, workers=settings.workers
        ).validated()
    )
    name = run_name(label or settings.model, settings.seed)
    path = out / "runs" / name
    _check_existing_run(path, train)
    return RunSpec(name, settings.model, settings.seed, str(path), train, sample, threads, gpus, label)


def _check_existing_run(path: Path, train: dict[str, Any]) -> None:
    """Refuse an existing run with settings that change the result; execution-only ones
    (`bgp4.settings.EXECUTION_ONLY`) may differ, and the resumed run takes the new values, as
    `bgp4 train` does."""
    stored = Stage(path).recorded()
    if stored is not None:
        differ = changed_settings(stored, with_fingerprint(train))  # the rules `bgp4 train` resumes by
        refuse_changes(f"{path} holds a run", differ, "use another sweep directory (--out)")


# --------------------------------------------------------------------------- the client side


def run_sweep(
    plan: SweepPlan,
    scheduler: str | None = None,
    workers: int | None = None,
    progress: bool = True,
    say: Callable[[str], None] = print,
    worker_memory: float | None = None,
) -> dict[str, Any]:
    """Run every unfinished run of `plan` on Dask, then write the aggregate report; returns its metrics.

    A local cluster's workers are each limited to `worker_memory` GiB (0: no limit; default:
    `local_memory_limit`'s share of the memory available now).

    Raises Bgp4Error after the report if some runs failed even after their retries.
    """
    check_worker_memory(scheduler, worker_memory, workers)
    pending = [r for r in plan.runs if not r.done]
    if pending or plan.md is not None:
        cluster = (scheduler, workers, worker_memory)
        metrics, failures, stopped = _run_on_dask(plan, pending, cluster, progress, say)
        if stopped:
            say(_stopped_message(stopped, failures))
            raise KeyboardInterrupt
    else:
        say(f"all {len(plan.runs)} runs are complete")
        _write_record(plan)
        metrics, failures = write_sweep_report(plan.out), {}
    if metrics is not None:
        say(f"report in {plan.out / 'report' / 'report.md'}")
    if failures:
        listed = "; ".join(f"{name}: {why}" for name, why in sorted(failures.items()))
        raise Bgp4Error(f"{len(failures)} run(s) failed ({listed}); see their log.txt, rerun to retry")
    return metrics or {}


def _write_record(plan: SweepPlan) -> None:
    atomic_write(plan.out / SWEEP_FILE, json.dumps(plan.record(), indent=1))


def _run_on_dask(
    plan: SweepPlan,
    pending: list[RunSpec],
    cluster: tuple[str | None, int | None, float | None],
    progress: bool,
    say: Callable[[str], None],
) -> tuple[dict[str, Any] | None, dict[str, str], dict[str, bool]]:
    """Simulate the data if needed, run `pending` on `cluster` (scheduler, workers, GiB per worker)
    and write the report unless stopped or every run failed: (report metrics or None, failed run ->
    reason, stopped run -> whether it had started)."""
    scheduler, workers, worker_memory = cluster
    threads, gpus = plan.runs[0].threads, plan.runs[0].gpus
    size = 0 if scheduler else local_cluster_size(len(pending), threads, gpus, workers)
    limit = 0 if scheduler else local_memory_limit(size, worker_memory)
    metrics = None
    with open_client(scheduler, size, gpus, limit) as client:  # connect before writing anything
        plan.out.mkdir(parents=True, exist_ok=True)
        _write_record(plan)
        memory = f"{limit / 2**30:.1f} GiB each" if limit else "no memory limit"
        where = scheduler or f"a local cluster of {size} worker process(es) ({memory}), {threads} thread(s) per run"
        say(f"{len(pending)} of {len(plan.runs)} runs to do on {where}")
        if plan.md is not None and not plan.data.exists():  # one task, simulate's own replicas
            say(f"simulating {plan.data} ({plan.md['frames']} frames) first")
            client.submit(simulate_task, str(plan.data), plan.md, pure=False, retries=RETRIES).result()
        # the report's imports load while the runs train (after the workers' own start-up), and
        # its figures are drawn on the idle workers: both would otherwise add to the idle tail
        warm = threading.Timer(WARM_UP_AFTER_S, _import_report_modules)
        warm.daemon = True
        warm.start()
        stop_event = f"bgp4-sweep-stop-{uuid.uuid4().hex}"
        try:
            failures, stopped = Dispatch(client, pending, stop_event).follow(
                progress, partial(_ask_to_stop, client, stop_event)
            )
        finally:
            warm.cancel()
        if not stopped and len(failures) < len(plan.runs):
            metrics = write_sweep_report(plan.out, executor=client.get_executor(pure=False))
    return metrics, failures, stopped


def _stopped_message(stopped: dict[str, bool], failures: dict[str, str]) -> str:
    started = sorted(name for name, began in stopped.items() if began)
    queued = sorted(name for name, began in stopped.items() if not began)
    return (
        "stopped"
        + (f": {', '.join(started)} saved their progress" if started else "")
        + (f"; not started: {', '.join(queued)}" if queued else "")
        + "".join(f"; {name} failed ({why})" for name, why in sorted(failures.items()))
        + "; rerun the same command to resume"
    )


def _import_report_modules() -> None:
    """Import what the aggregate report needs (matplotlib, scipy.stats, torch: a few seconds)."""
    # lazy on purpose: called from a timer thread, so the client starts (and connects) without them
    import scipy.stats  # noqa: F401

    import bgp4.analysis.plots  # noqa: F401
    import bgp4.generator.sample  # noqa: F401
    import bgp4.report.analyze  # noqa: F401


def _ask_to_stop(client: Any, event: str) -> None:
    """Set the sweep's stop event: running trainings checkpoint at their next step and return.
    Without a scheduler to tell, stop at once (KeyboardInterrupt)."""
    from distributed import Event

    try:
        Event(event, client=client).set()
    except Exception:  # noqa: BLE001 - the scheduler is gone: nobody is left to stop gracefully
        raise KeyboardInterrupt from None
