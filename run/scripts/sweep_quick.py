"""Wall time of a quick-preset sweep on Dask against the same runs one after another.

The settings below are the quick preset's as it was when run/results/sweep-quick was measured
(4,000 + 400 steps, 20,000 samples), kept so that those timings can be repeated; the preset
itself has changed since (bgp4/pipeline.py).

    python run/scripts/sweep_quick.py [--out out/sweep-bench] [--seeds 3] [--tiny] [--sweep-only]

1. MD data with the quick preset's settings (`bgp4 simulate`, not timed; skipped if present).
2. Sequential: each (model, seed) run with the plain CLI, one after another
   (`bgp4 train`, `bgp4 sample`, `bgp4 analyze`, torch on all cores), timed.
3. `bgp4 sweep` of the same runs on the default local cluster, timed, with the share of CPU
   time the machine's cores were busy (from /proc/stat) while it ran.
Prints the wall times, the speedup, and the sweep's overhead: its wall time against the sum of
its tasks' own wall times divided by the number of workers (what a perfect scheduler needs).
The sweep hands out each run's training in parts; per run it also prints the task time beyond the
training steps themselves (building the run on a worker, restoring checkpoints, evaluations,
sampling, analysis), and per worker process how long it sat idle before the last task ended;
`OUT/tasks.txt` lists every task with its start, end and worker.
`--tiny` uses a few dozen steps and few samples (a smoke test of this script, minutes).
`--sweep-only` skips step 2 (no speedup then): the overhead needs only the sweep's own times.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

__all__ = [
    "bgp4",
    "cpu_times",
    "idle_at_end",
    "main",
    "parse_args",
    "sequential_run",
    "summarize",
    "sweep_records",
    "timed_sweep",
    "write_timeline",
]

QUICK_MD = ["--frames", "100000", "--save-every", "25", "--equilibration-ps", "20"]
QUICK_TRAIN = ["--steps", "4000", "--energy-steps", "400", "--eval-every", "500"]
QUICK_SAMPLES = "20000"
TINY_MD = ["--frames", "3000", "--equilibration-ps", "2"]
TINY_TRAIN = [
    "--steps",
    "60",
    "--energy-steps",
    "5",
    "--blocks",
    "2",
    "--hidden",
    "16",
    "--batch",
    "64",
    "--eval-every",
    "20",
]
TINY_SAMPLES = "300"


def bgp4(*args: str) -> float:
    """Run one bgp4 command; returns its wall time in s (raises if it fails)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bgp4.cli", *args], check=True)
    return time.perf_counter() - started


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def write_timeline(runs_dir: Path, path: Path) -> None:
    """Every task of a sweep by start time (s from the first start), from the runs' sweep-tasks.jsonl."""
    rows = []
    for tasks in sorted(runs_dir.glob("*/sweep-tasks.jsonl")):
        for line in tasks.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                rows.append((record["ended"] - record["wall_s"], tasks.parent.name, record))
    t0 = min(start for start, _, _ in rows)
    lines = ["start_s   end_s  wall_s  worker  run  task"]
    for start, run, r in sorted(rows, key=lambda row: row[0]):
        what = f"train to step {r['until']}" if r["task"] == "train" else "sample and analyze"
        built = f" (built the run: {r['build_s']:.1f} s)" if r.get("build_s") else ""
        lines.append(
            f"{start - t0:7.1f} {r['ended'] - t0:7.1f} {r['wall_s']:6.1f}"
            f"  {r['worker'].split()[-1]}  {run}  {what}{built}"
        )
    path.write_text("\n".join(lines) + "\n")


def parse_args() -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/sweep-bench"))
    parser.add_argument("--models", default="rnvp,p4inv")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="tiny settings: a smoke test of this script")
    parser.add_argument("--sweep-only", action="store_true", help="skip the sequential runs (no speedup figure)")
    return parser.parse_args()


def sequential_run(data: Path, run: Path, model: str, seed: int, train: list[str], samples: str) -> float:
    """Train, sample and analyze one run with the plain CLI; returns the summed wall time in s."""
    return (
        bgp4(
            "train",
            "--data",
            str(data),
            "--model",
            model,
            "--seed",
            str(seed),
            "--out",
            str(run),
            "--device",
            "cpu",
            *train,
            "--quiet",
        )
        + bgp4("sample", str(run), "--n", samples, "--seed", str(seed), "--device", "cpu", "--quiet")
        + bgp4("analyze", "--data", str(data), str(run), "--out", str(run / "report"), "--seed", str(seed))
    )


def timed_sweep(a: argparse.Namespace, data: Path, train: list[str], samples: str) -> tuple[float, float]:
    """Run `bgp4 sweep` of all runs; returns its wall time in s and the share of CPU time busy meanwhile."""
    busy0, total0 = cpu_times()
    t_sweep = bgp4(
        "sweep",
        "--data",
        str(data),
        "--out",
        str(a.out / "sweep"),
        "--models",
        a.models,
        "--seeds",
        str(a.seeds),
        *train,
        "--samples",
        samples,
        "--quiet",
    )
    busy1, total1 = cpu_times()
    return t_sweep, (busy1 - busy0) / (total1 - total0)


def sweep_records(runs_dir: Path) -> tuple[dict[str, float], dict[str, float], list[dict]]:
    """Per run its tasks' wall time and its training's wall time; and every task's record."""
    tasks = {p.parent.name: json.loads(p.read_text())["task_wall_s"] for p in runs_dir.glob("*/sweep-done.json")}
    trained = {p.parent.name: json.loads(p.read_text())["wall_s"] for p in runs_dir.glob("*/complete.json")}
    records = [
        json.loads(line)
        for p in runs_dir.glob("*/sweep-tasks.jsonl")
        for line in p.read_text().splitlines()
        if line.strip()
    ]
    return tasks, trained, records


def idle_at_end(records: list[dict]) -> dict[str, float]:
    """Per worker, the s between the end of its own last task and the end of the sweep's last task."""
    last = max(r["ended"] for r in records)
    return {
        w: round(last - max(r["ended"] for r in records if r["worker"] == w), 1) for w in {r["worker"] for r in records}
    }


def summarize(
    a: argparse.Namespace, n_runs: int, sequential: dict[str, float], t_sweep: float, cpu_busy: float
) -> dict:
    """The printed and saved result: wall times, speedup, the sweep's overhead and its tasks' times."""
    t_sequential = sum(sequential.values())
    tasks, trained, records = sweep_records(a.out / "sweep" / "runs")
    cores = len(os.sched_getaffinity(0))
    workers = min(cores, n_runs)
    ideal = sum(tasks.values()) / workers
    return {
        "runs": n_runs,
        "cores": cores,
        "workers": workers,
        "sequential_s": None if a.sweep_only else round(t_sequential, 1),
        "sequential_per_run_s": {k: round(v, 1) for k, v in sequential.items()},
        "sweep_s": round(t_sweep, 1),
        "sweep_task_s": tasks,
        "tasks": len(records),
        "task_s_beyond_training": {k: round(v - trained.get(k, 0.0), 1) for k, v in tasks.items()},
        "builds": sum(1 for r in records if r.get("build_s")),
        "build_s": round(sum(r.get("build_s", 0.0) for r in records), 1),
        "idle_before_the_last_task_ended_s": idle_at_end(records),
        "speedup": None if a.sweep_only else round(t_sequential / t_sweep, 3),
        "sweep_overhead": round(t_sweep / ideal - 1.0, 4),
        "cpu_busy_during_sweep": round(cpu_busy, 3),
    }


def main() -> None:
    """MD data, then the sequential runs and the sweep, timed; prints and saves the result."""
    a = parse_args()
    md, train, samples = (TINY_MD, TINY_TRAIN, TINY_SAMPLES) if a.tiny else (QUICK_MD, QUICK_TRAIN, QUICK_SAMPLES)
    data = a.out / "data.h5"
    if not data.exists():
        bgp4("simulate", "--out", str(data), *md, "--quiet")

    runs = [(m, s) for m in a.models.split(",") for s in range(a.seeds)]
    sequential: dict[str, float] = {}
    for model, seed in [] if a.sweep_only else runs:
        run = a.out / "sequential" / f"{model}-s{seed}"
        sequential[run.name] = sequential_run(data, run, model, seed, train, samples)

    t_sweep, cpu_busy = timed_sweep(a, data, train, samples)
    result = summarize(a, len(runs), sequential, t_sweep, cpu_busy)
    print(json.dumps(result, indent=1))
    (a.out / "sweep_quick.json").write_text(json.dumps(result, indent=1))
    write_timeline(a.out / "sweep" / "runs", a.out / "tasks.txt")


if __name__ == "__main__":
    main()
