"""What a sweep's Dask workers run: a part of one (model, seed) run's training, its sampling and
analysis, or the MD that feeds them.

Training is handed out in parts (`train_task` trains to a given step and saves a checkpoint), so
that the runs can share the workers evenly to the end. A worker process keeps the runs it trained
in a `TrainerCache` (data mapped to flow coordinates, compiled likelihood, OpenMM workers), so
that a later part of the same run there starts at once from the checkpoint.

Each task holds the run directory's lock file (`run.lock`, an OS lock the kernel drops when its
process dies), so a second copy of the same task waits instead of writing beside the first,
appends everything it prints to the run's `log.txt`, and when it ends adds one line (what, where,
how long) to the run's `sweep-tasks.jsonl`.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bgp4._child import python_command
from bgp4._io import append_record, read_records
from bgp4.errors import Bgp4Error, InputError
from bgp4.settings import RefineSettings, SampleSettings, TrainSettings
from bgp4.sweep.plugins import stop_asked, trainer_cache
from bgp4.sweep.spec import LOCK_FILE, LOG_FILE, TASKS_FILE, RunSpec

# torch, bgp4.generator and bgp4.report.analyze are imported lazily, inside the task under the run's lock and
# log: the sweep client imports this module and stays free of torch, and a worker's import time and messages
# count in (and go to) the task that caused them.

__all__ = ["train_task", "finish_task", "simulate_task"]


@contextlib.contextmanager
def _locked_and_logged(lock: Path, log: Path, what: str = "") -> Iterator[Callable[[str], None]]:
    """Hold `lock` (waiting for another live holder) with stdout/stderr appended to `log`."""
    from filelock import FileLock, Timeout

    lock.parent.mkdir(parents=True, exist_ok=True)
    who = f"{socket.gethostname()} pid {os.getpid()}"
    with open(log, "a", buffering=1) as stream, contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):

        def say(message: str) -> None:
            print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {message}", flush=True)

        file_lock = FileLock(str(lock))
        try:
            file_lock.acquire(timeout=0)
        except Timeout:
            say(f"{who}: another copy of this task holds {lock.name}; waiting for it to finish or die")
            file_lock.acquire()
        try:
            say(f"{who}: task started" + (f": {what}" if what else ""))
            yield say
        except KeyboardInterrupt:
            say(f"{who}: task stopped; a rerun of the sweep resumes it")
            raise
        except BaseException as error:
            say(f"{who}: task failed: {type(error).__name__}: {error}")
            raise
        finally:
            file_lock.release()


def _select_gpu(gpus: float) -> None:
    """On a worker with several visible GPUs, give each local worker its own (by worker name)."""
    if gpus <= 0:
        return
    import torch

    count = torch.cuda.device_count()
    if count > 1:
        from distributed import get_worker

        with contextlib.suppress(ValueError):
            name = get_worker().name
            if isinstance(name, int) or str(name).isdigit():
                torch.cuda.set_device(int(name) % count)


def _as_task(
    spec: RunSpec, stop_event: str | None, work: Callable[[Callable[[], bool]], dict[str, Any]]
) -> dict[str, Any]:
    """Run `work(stop)` for one run as a Dask task.

    Bad input, which would fail the same way again, is returned as {"run", "error"} rather than
    raised, so that Dask does not retry it; {"run", "stopped", "started"} when the Dask Event
    `stop_event` was set (training saved a checkpoint at a step boundary first). Other
    exceptions are raised and retried.
    """
    stop = stop_asked(stop_event)
    if stop():  # still queued when the sweep was stopped
        return {"run": spec.name, "stopped": True, "started": False}
    try:
        return work(stop)
    except InputError as error:
        return {"run": spec.name, "error": str(error)}
    except KeyboardInterrupt:  # stop() turned true: training saved its checkpoint, or a stage ended
        if not stop():
            raise
        return {"run": spec.name, "stopped": True, "started": True}


def train_task(spec: RunSpec, until: int, stop_event: str | None = None) -> dict[str, Any]:
    """Train one run to global step `until` (from its checkpoint) and save a checkpoint there;
    when that is the last step, also write model.pt and complete.json.

    Returns {"run", "step", "complete", "wall_s"}, or as `_as_task` says.
    """
    return _as_task(spec, stop_event, lambda stop: _train_part(spec, until, stop))


def finish_task(spec: RunSpec, stop_event: str | None = None) -> dict[str, Any]:
    """Sample and analyze one trained run (each stage skipped when complete); writes sweep-done.json.

    Returns {"run", "sampled", "analyzed", "wall_s"}, or as `_as_task` says.
    """
    return _as_task(spec, stop_event, lambda stop: _finish_run(spec, stop))


def _train_part(spec: RunSpec, until: int, stop: Callable[[], bool]) -> dict[str, Any]:
    run = Path(spec.path)
    started = time.perf_counter()  # the imports count: a new worker process pays for them
    with _locked_and_logged(run / LOCK_FILE, run / LOG_FILE, f"train to step {until}") as say:
        import torch

        from bgp4.generator.train import finish_training, prepare_training

        torch.set_num_threads(spec.threads)
        _select_gpu(spec.gpus)
        cache, key = trainer_cache(), json.dumps([spec.path, spec.train], sort_keys=True)
        trainer = cache.take(key) if cache is not None else None
        build = 0.0
        if trainer is None:
            built = time.perf_counter()
            trainer = prepare_training(TrainSettings(**spec.train), run)
            build = time.perf_counter() - built
        if trainer.complete:  # complete already
            summary, step = trainer.summary, trainer.step
        else:
            summary = trainer.fit(progress=False, stop=stop, until=until)
            step = trainer.step
            if summary is not None:
                finish_training(trainer, summary)
            elif cache is not None:
                cache.put(key, trainer)
            else:
                trainer.close()
        wall = time.perf_counter() - started
        if summary is not None:
            say(f"train: complete; test NLL {summary.get('test_nll_end')}, {summary.get('wall_s')} s of training")
        say(f"task finished in {wall:.1f} s at step {step}" + (f" (building the run: {build:.1f} s)" if build else ""))
        _add_task_record(
            run, {"task": "train", "until": until, "step": step, "wall_s": round(wall, 3), "build_s": round(build, 3)}
        )
    return {"run": spec.name, "step": step, "complete": summary is not None, "wall_s": wall}


def _finish_run(spec: RunSpec, stop: Callable[[], bool]) -> dict[str, Any]:
    run = Path(spec.path)
    started = time.perf_counter()
    with _locked_and_logged(run / LOCK_FILE, run / LOG_FILE, "sample and analyze") as say:
        import torch

        from bgp4.generator.sample import refine_run, sample_run
        from bgp4.report.aggregate import sweep_grid
        from bgp4.report.analyze import analyze

        torch.set_num_threads(spec.threads)
        _select_gpu(spec.gpus)
        samples, sampled = sample_run(run, SampleSettings(**spec.sample), progress=False, renew=True)
        say(f"sample: {'sampled' if sampled else 'complete'}; mean energy {samples.get('mean_energy_kT')} kT")
        if stop():
            raise KeyboardInterrupt
        if spec.refine:
            refine = RefineSettings(**spec.refine)
            refined, newly = refine_run(run, SampleSettings(**spec.sample), refine, progress=False, renew=True)
            sampled = sampled or newly
            say(f"refine: {'refined' if newly else 'complete'}; reverse ESS {refined.get('reverse_ess')}")
            if stop():
                raise KeyboardInterrupt
        report = run / "report" / "metrics.json"
        # a report older than the samples was made from samples since drawn again (`renew`)
        analyzed = sampled or not report.exists() or report.stat().st_mtime < _newest_samples(run)
        if analyzed:
            grid = sweep_grid(run.parent.parent)  # the grid the sweep reports on: one analysis, not two
            analyze(
                spec.train["data"],
                [run],
                run / "report",
                seed=spec.seed,
                workers=spec.train["workers"],
                temperature=spec.train.get("temperature"),  # of a data file that records none
                rama_bins=grid,
            )
            say("analyze: metrics in report/metrics.json")
        wall = time.perf_counter() - started
        tasks = [*_task_records(run), {"task": "finish", "wall_s": round(wall, 3), "build_s": 0.0}]
        _add_task_record(run, tasks[-1])
        payload = {
            "train": spec.train,
            "sample": spec.sample,
            "refine": spec.refine,
            "host": socket.gethostname(),
            "task_wall_s": round(sum(t["wall_s"] for t in tasks), 2),
            "tasks": len(tasks),
            "build_s": round(sum(t.get("build_s", 0.0) for t in tasks), 2),
        }
        spec.stage().finish(payload)  # the run's marker, written last: RunSpec.done reads it
        say(f"task finished in {wall:.1f} s")
    return {"run": spec.name, "sampled": sampled, "analyzed": analyzed, "wall_s": wall}


def _newest_samples(run: Path) -> float:
    """The modification time of the run's newest samples file (raw or refined); 0 when none."""
    from bgp4.generator.sample import default_samples_path, refined_path

    raw = default_samples_path(run)
    return max((f.stat().st_mtime for f in (raw, refined_path(raw)) if f.exists()), default=0.0)


def _add_task_record(run: Path, record: dict[str, Any]) -> None:
    """Append one finished task (with where and when it ended) to the run's sweep-tasks.jsonl."""
    record = {**record, "worker": f"{socket.gethostname()} pid {os.getpid()}", "ended": time.time()}
    append_record(run / TASKS_FILE, record)


def _task_records(run: Path) -> list[dict[str, Any]]:
    return read_records(run / TASKS_FILE)


# `bgp4 simulate` as a worker's child: it dies with the worker (which may be killed when the sweep
# stops), and takes Ctrl-C again, which the worker's IgnoreInterrupts would pass on as ignored
_SIMULATE_CHILD = (
    "import signal, sys; from bgp4._child import die_with_parent; die_with_parent(); "
    "signal.signal(signal.SIGINT, signal.default_int_handler); sys.argv[0] = 'bgp4'; "
    "from bgp4.cli import main; sys.exit(main())"
)


def simulate_task(data: str, md: dict[str, Any]) -> str:
    """Simulate the MD data file. `bgp4 simulate` runs as a child process of the worker, which takes
    the replica processes along when the worker dies, and stops them on Ctrl-C as in a terminal."""
    import subprocess

    out = Path(data)
    with _locked_and_logged(out.with_name(out.name + ".lock"), out.with_name(out.name + ".log.txt")) as say:
        if out.exists():
            say(f"{out} exists")
            return data
        flags = [a for k, v in md.items() for a in (f"--{k.replace('_', '-')}", str(v))]
        say("bgp4 simulate " + " ".join(flags))
        sys.stdout.flush()
        argv, env = python_command("-c", _SIMULATE_CHILD, "simulate", "--out", data, "--quiet", *flags)
        done = subprocess.run(argv, env=env, stdout=sys.stdout, stderr=sys.stdout)
        if done.returncode != 0:
            raise Bgp4Error(f"simulating {data} failed (exit code {done.returncode}); see {out.name}.log.txt")
    return data
