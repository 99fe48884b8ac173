"""Train a run in parts of 125 steps (STEPS steps, the settings of RUN's settings.json) and then sample and refine it
(20,000 samples, AIS(48) by independence moves, batch 10,000) in one plain process, not a Dask
worker; print the process's RSS (GiB) every 3 s from sampling on.

Usage: python train_in_parts_then_refine.py RUN STEPS OUT   (STEPS a multiple of 125)
"""

import json
import sys
import threading
import time

import psutil
import torch

from bgp4.generator.sample import refine_run, sample_run
from bgp4.generator.train import finish_training, prepare_training
from bgp4.settings import RefineSettings, SampleSettings, TrainSettings

trace: list[float] = []
PART = 125


def watch() -> None:
    process = psutil.Process()
    while True:
        trace.append(process.memory_info().rss / 2**30)
        time.sleep(1)


if __name__ == "__main__":
    source, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(1)
    settings = json.load(open(f"{source}/settings.json"))
    settings = {k: v for k, v in settings.items() if k in TrainSettings.__dataclass_fields__}
    settings["steps"] = steps
    trainer = prepare_training(TrainSettings(**settings), out)
    summary = None
    for until in range(PART, steps + 1, PART):  # in parts, as a sweep worker trains (train_task)
        summary = trainer.fit(progress=False, until=until)
    finish_training(trainer, summary)
    threading.Thread(target=watch, daemon=True).start()
    sample = SampleSettings(n=20000, batch=10000, workers=1, device="cpu", seed=0)
    sample_run(out, sample, progress=False)
    started = time.time()
    refine_run(out, sample, RefineSettings(levels=48, steps=0), progress=False)
    print(f"refine {time.time() - started:.0f} s;", " ".join(f"{x:.1f}" for x in trace[::3]), f"max {max(trace):.2f}")
