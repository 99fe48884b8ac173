"""Refine a trained run (20,000 samples, AIS(48) by independence moves, batch 10,000) in a fresh
process, on the main thread (`main`) or on another thread (`thread`, as Dask runs tasks), or on
another thread while a third samples its stack every 10 ms as a Dask worker's profiler does
(`profiled`: `distributed.profile.process` on `sys._current_frames()`, the worker's
`trigger_profile`); print the process's RSS (GiB) every 3 s.

Usage: python refine_in_thread.py RUN main|thread|profiled
"""

import sys
import tempfile
import threading
import time

from _rss import start_trace

from bgp4.generator.sample import refine_run
from bgp4.settings import RefineSettings, SampleSettings


def profile_while(worker: threading.Thread) -> None:
    """Sample `worker`'s stack every 10 ms into one profile, as a Dask worker does, until it ends."""
    from distributed import profile

    state = profile.create()
    while worker.is_alive():
        frame = sys._current_frames().get(worker.ident)
        if frame is not None:
            profile.process(frame, None, state, stop="threading.py")
        del frame
        time.sleep(0.01)


def work(run: str, out: str) -> None:
    started = time.time()
    settings = SampleSettings(n=20000, batch=10000, workers=1, device="cpu", seed=0)
    summary, _ = refine_run(run, settings, RefineSettings(levels=48, steps=0), out=out, overwrite=True, progress=False)
    print(f"wall {time.time() - started:.1f} s, reverse ESS {summary.get('reverse_ess')}")


if __name__ == "__main__":
    run, where = sys.argv[1], sys.argv[2]
    trace = start_trace()
    with tempfile.TemporaryDirectory() as scratch:
        if where in ("thread", "profiled"):
            worker = threading.Thread(target=work, args=(run, f"{scratch}/s.h5"))
            worker.start()
            if where == "profiled":
                profile_while(worker)
            worker.join()
        else:
            work(run, f"{scratch}/s.h5")
    print(" ".join(f"{x:.1f}" for x in trace[::3]), f"max {max(trace):.2f}")
