"""Training-step time on one and on two torch threads: would the last run of a sweep gain from
the core an idle worker leaves?

    python run/bench/bench_threads.py DATA.h5 [--model p4inv] [--steps 100]

Builds a quick-preset run (4,000 + 400 steps, batch 256, compiled as the sweep compiles it) in a
temporary directory and times likelihood steps on 1, 2, 1, 2 threads, after 5 warm-up steps each.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from bgp4.generator.train import prepare_training
from bgp4.settings import TrainSettings

__all__ = ["main"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("--model", default="p4inv")
    parser.add_argument("--steps", type=int, default=100)
    a = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as out:
        settings = TrainSettings(data=a.data, model=a.model, steps=4000, energy_steps=400, eval_every=500, workers=1)
        trainer = prepare_training(settings, out)
        trainer.loop.compile(progress=False)
        for threads in (1, 2, 1, 2):
            torch.set_num_threads(threads)
            for _ in range(5):
                trainer.loop.train_step(None)
            started = time.perf_counter()
            for _ in range(a.steps):
                trainer.loop.train_step(None)
            print(
                f"{a.model}: {threads} thread(s): {1000 * (time.perf_counter() - started) / a.steps:.1f} ms per step",
                flush=True,
            )


if __name__ == "__main__":
    main()
