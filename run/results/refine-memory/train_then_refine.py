"""Train a run (STEPS steps with the settings of RUN's settings.json; in parts of PART steps as a
sweep worker trains, or at once with PART 0), then sample and refine it (20,000 samples, AIS(48)
by independence moves, batch 10,000), in one plain process, not a Dask worker; print the RSS
(GiB) every 3 s from sampling on.

Usage: python train_then_refine.py RUN STEPS OUT [PART]
"""

import json
import sys
import time

import torch
from _rss import start_trace

from bgp4.generator.sample import refine_run, sample_run
from bgp4.generator.train import finish_training, prepare_training
from bgp4.settings import RefineSettings, SampleSettings, TrainSettings

if __name__ == "__main__":
    source, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    part = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    torch.set_num_threads(1)
    settings = json.load(open(f"{source}/settings.json"))
    settings = {k: v for k, v in settings.items() if k in TrainSettings.__dataclass_fields__}
    settings["steps"] = steps
    trainer = prepare_training(TrainSettings(**settings), out)
    for until in range(part, steps, part) if part else []:
        trainer.fit(progress=False, until=until)
    summary = trainer.fit(progress=False)
    finish_training(trainer, summary)
    trace = start_trace()
    sample = SampleSettings(n=20000, batch=10000, workers=1, device="cpu", seed=0)
    sample_run(out, sample, progress=False)
    started = time.time()
    refine_run(out, sample, RefineSettings(levels=48, steps=0), progress=False)
    print(f"refine {time.time() - started:.0f} s;", " ".join(f"{x:.1f}" for x in trace[::3]), f"max {max(trace):.2f}")
