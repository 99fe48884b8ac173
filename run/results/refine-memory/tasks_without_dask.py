"""Run a sweep run's tasks (`bgp4.sweep.tasks.train_task` in parts of 125 steps, then
`finish_task`) in one plain process, each on a thread of its own as a Dask worker would, without
Dask (so without the worker's trainer cache); print the RSS (GiB) every 3 s of the finish task.

Usage: python tasks_without_dask.py DONE_RUN OUT   (DONE_RUN: a finished sweep run, for its settings)
"""

import json
import sys
import threading

from _rss import start_trace

from bgp4.sweep.spec import RunSpec
from bgp4.sweep.tasks import finish_task, train_task


def on_thread(fn, *args) -> None:
    thread = threading.Thread(target=fn, args=args)
    thread.start()
    thread.join()


if __name__ == "__main__":
    done = json.load(open(f"{sys.argv[1]}/sweep-done.json"))
    spec = RunSpec(
        name="spline-s0", model="spline", seed=0, path=sys.argv[2], train=dict(done["train"], steps=500),
        sample=done["sample"], threads=1, gpus=0.0, refine=done["refine"],
    )  # fmt: skip
    trace = start_trace()
    for until in range(125, 501, 125):
        on_thread(train_task, spec, until)
    start = len(trace)
    on_thread(finish_task, spec)
    print("finish:", " ".join(f"{x:.1f}" for x in trace[start::3]), f"max {max(trace[start:]):.2f}")
