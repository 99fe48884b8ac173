"""Test NLL against train NLL of training runs (their metrics.jsonl): the test NLL at a step and the
mean train NLL of the 1,000 steps before it (train NLL is logged on minibatches), and the gap.
A gap near zero says the flow fits held-out frames as well as the ones it learns from: more frames
of the same data would not lower its NLL much.

    python nll_gap.py RUN/metrics.jsonl [...]
"""

from __future__ import annotations

import json
import sys

STEPS = (2000, 4000, 10000, 20000)


def gaps(path: str) -> list[tuple[int, float, float]]:
    rows = [json.loads(line) for line in open(path)]
    train = {r["global_step"]: r["train_nll"] for r in rows if "train_nll" in r}
    tests = [r for r in rows if "test_nll" in r]
    out = []
    for r in [t for t in tests if t["global_step"] in STEPS] + tests[-1:]:
        step = r["global_step"]
        window = [v for s, v in train.items() if step - 1000 < s <= step]
        if window and step not in [o[0] for o in out]:
            out.append((step, r["test_nll"], sum(window) / len(window)))
    return out


if __name__ == "__main__":
    print("run  step  test_nll  train_nll  gap (test - train, nats)")
    for path in sys.argv[1:]:
        for step, test, train in gaps(path):
            print(f"{path}  {step}  {test:.3f}  {train:.3f}  {test - train:+.3f}")
