"""Handing a sweep's runs to Dask in parts, the run with the most training left first.

A run's training is cut into about PARTS_PER_RUN parts of equal expected cost (`train_task` trains
to a step and saves a checkpoint), and its last task samples and analyzes it (`finish_task`). The
client keeps at most as many tasks on the cluster as its workers hold at once (`task_slots`) and
gives each free slot to the run with the most training left, so that the runs advance together and
the workers finish together: at the end a worker waits for about one part of one run, where with
whole runs it could wait for most of a run. A run whose part just ended goes on unless another has
more than one part more left, which keeps it on the worker that holds it ready (`TrainerCache`).
The rest wait here rather than on the scheduler, which places the first few tasks it is given at
once, in the order they arrive, whatever their priority.

    >>> dispatch = Dispatch(client, specs, stop_event)  # doctest: +SKIP
    >>> failures, stopped = dispatch.follow(progress=True, ask_to_stop=lambda: None)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from bgp4._stop import StopRequest
from bgp4.errors import first_line
from bgp4.kinds import DEFAULT_OBJECTIVE, KINDS, get_kind
from bgp4.stage import Stage
from bgp4.sweep.cluster import task_slots
from bgp4.sweep.spec import RunSpec
from bgp4.sweep.tasks import finish_task, train_task

__all__ = [
    "PARTS_PER_RUN",
    "MIN_PART_STEPS",
    "ENERGY_STEP_COST",
    "energy_step_cost",
    "STEP_COST",
    "RETRIES",
    "Dispatch",
    "choose",
    "expected_cost",
    "failure_reason",
    "next_stop",
    "part_size",
    "remaining_cost",
]

#: Parts each run's training is handed out in.
PARTS_PER_RUN = 12
#: Fewest (likelihood) steps in a part: each part saves a checkpoint (0.1 s at the paper's sizes).
MIN_PART_STEPS = 100
#: Cost of a mixed (or kl) energy-phase step against a likelihood step (sampling and OpenMM forces;
#: 3.3-3.5x measured in a quick-preset sweep).
ENERGY_STEP_COST = 3
#: Cost of one MALA move of an AIS sample against a likelihood step per frame (energy, forces and
#: a backward pass through the flow, as an energy-phase step); an independence move costs a third.
MALA_MOVE_COST = ENERGY_STEP_COST
#: Rough cost of one training step per frame of the batch, relative to rnvp (the kinds' step_cost
#: in bgp4.kinds, from CPU step times of the studies in run/results/); only the order of the tasks depends on it.
STEP_COST = {name: kind.step_cost for name, kind in KINDS.items()}
#: Retries of a task that raised; a task whose worker died is rescheduled by the scheduler
#: (`distributed.scheduler.allowed-failures`, 3 by default) and resumes from its checkpoint.
RETRIES = 2
#: Seconds between two looks at how many tasks the workers hold (workers may come and go).
SLOTS_EVERY_S = 5.0


def expected_cost(spec: RunSpec) -> int:
    """A run's expected cost in rnvp-step-frames (an energy step counts `energy_step_cost`)."""
    return remaining_cost(spec, 0)


def remaining_cost(spec: RunSpec, step: int) -> int:
    """The expected cost of a run's training from global step `step` on, as `expected_cost`."""
    return _cost(
        spec, _weighted_steps(spec, spec.train["steps"] + spec.train["energy_steps"]) - _weighted_steps(spec, step)
    )


def _cost(spec: RunSpec, weighted_steps: int) -> int:
    """rnvp-step-frames of `weighted_steps` likelihood steps of this run."""
    return int(weighted_steps * spec.train["batch"] * get_kind(spec.model).step_cost)


def energy_step_cost(train: dict[str, Any]) -> int:
    """The cost of one energy-phase step of a run with `train` settings, in likelihood steps:
    ENERGY_STEP_COST (mixed, kl), or for fab one buffer step plus its share of an AIS batch
    (1 + levels x (independence + MALA_MOVE_COST x moves x leapfrog) per sample, every `fab_reuse` steps)."""
    if train.get("objective", DEFAULT_OBJECTIVE) != "fab":
        return ENERGY_STEP_COST
    moves = train["fab_independence"] + MALA_MOVE_COST * train["fab_moves"] * train.get("fab_leapfrog", 1)
    return 1 + -(-(1 + train["fab_levels"] * moves) // train["fab_reuse"])


def _weighted_steps(spec: RunSpec, step: int) -> int:
    """Steps 0..step with each energy step counted `energy_step_cost` times."""
    ml = spec.train["steps"]
    return min(step, ml) + energy_step_cost(spec.train) * max(0, step - ml)


def part_size(spec: RunSpec) -> int:
    """One part of a run's training, in likelihood steps (an energy step counts `energy_step_cost`)."""
    return max(
        MIN_PART_STEPS, -(-_weighted_steps(spec, spec.train["steps"] + spec.train["energy_steps"]) // PARTS_PER_RUN)
    )


def next_stop(spec: RunSpec, step: int) -> int:
    """The global step the part that starts at `step` trains to: parts of equal expected cost, so
    that an energy-phase part has 1/`energy_step_cost` the steps of a likelihood-phase one."""
    total, ml, part = spec.train["steps"] + spec.train["energy_steps"], spec.train["steps"], part_size(spec)
    target = (_weighted_steps(spec, step) // part + 1) * part  # in weighted steps
    stop = target if target <= ml else ml + -(-(target - ml) // energy_step_cost(spec.train))
    return min(total, stop)


def choose(waiting: list[RunSpec], left: Callable[[RunSpec], int], last: str | None = None) -> RunSpec:
    """The run to hand the next free slot: the one with the most left (first in `waiting` among
    equals), or `last` (whose part just ended) unless another has more than one part more left."""
    best = max(waiting, key=left)
    for spec in waiting:
        if spec.name == last and left(best) - left(spec) <= _cost(spec, part_size(spec)):
            return spec
    return best


def _recorded_step(spec: RunSpec) -> int:
    """The last step in a run's metrics log (0 when none): where its training goes on, give or
    take the steps since its last checkpoint (the part it is handed trains on from there)."""
    return Stage(spec.path).last_step()


def _total_steps(spec: RunSpec) -> int:
    return spec.train["steps"] + spec.train["energy_steps"]


class Dispatch:
    """Hands the runs `specs` to `client` part by part (see the module docstring)."""

    def __init__(self, client: Any, specs: list[RunSpec], stop_event: str):
        self.client, self.stop_event = client, stop_event
        self.gpus = specs[0].gpus if specs else 0.0
        self.resources = {"GPU": self.gpus} if self.gpus > 0 else None
        self.step = {s.name: _recorded_step(s) for s in specs}
        self.trained = {s.name: Stage(s.path).complete for s in specs}
        self.waiting: list[RunSpec] = list(specs)
        self.running: dict[Any, RunSpec] = {}
        self.last: str | None = None
        self.slots, self.slots_at = 1, -SLOTS_EVERY_S

    def left(self, spec: RunSpec) -> int:
        return 0 if self.trained[spec.name] else remaining_cost(spec, self.step[spec.name])

    def submit(self) -> None:
        """Fill the free slots from `waiting`."""
        if time.monotonic() - self.slots_at >= SLOTS_EVERY_S:
            self.slots, self.slots_at = task_slots(self.client, self.gpus), time.monotonic()
        while self.waiting and len(self.running) < self.slots:
            spec = choose(self.waiting, self.left, self.last)
            self.waiting.remove(spec)
            self.last = None
            if self.trained[spec.name]:
                task, args = finish_task, (spec, self.stop_event)
            else:
                task, args = train_task, (spec, next_stop(spec, self.step[spec.name]), self.stop_event)
            future = self.client.submit(task, *args, pure=False, retries=RETRIES, resources=self.resources)
            self.running[future] = spec

    def follow(self, progress: bool, ask_to_stop: Callable[[], None]) -> tuple[dict[str, str], dict[str, bool]]:
        """Run everything with one bar over runs (and the steps of the runs in training); returns
        (failed run -> reason, stopped run -> whether it had started). The first Ctrl-C or SIGTERM
        calls `ask_to_stop` and waits for the running tasks to save their checkpoints; a second
        one stops at once."""
        from distributed import TimeoutError as WaitedEnough
        from distributed import wait
        from tqdm.auto import tqdm

        failures: dict[str, str] = {}
        stopped: dict[str, bool] = {}
        total = len(self.waiting)
        shown = ""
        request, asked = StopRequest(), False
        try:
            with tqdm(total=total, desc="runs", unit="run", disable=not progress) as bar:
                while self.waiting or self.running:
                    if request.requested and not asked:
                        ask_to_stop()
                        asked = True
                        bar.write(
                            "stopping: training runs save a checkpoint at their next step, runs that sample or "
                            "analyze finish that stage first (interrupt again to stop at once)"
                        )
                    if asked:
                        stopped.update({s.name: self.step[s.name] > 0 or self.trained[s.name] for s in self.waiting})
                        self.waiting = []
                    else:
                        self.submit()
                    with contextlib.suppress(WaitedEnough):  # back within 0.5 s: a stop request, a new slot
                        wait(list(self.running), timeout=0.5, return_when="FIRST_COMPLETED")
                    for future in [f for f in self.running if f.done()]:
                        spec = self.running.pop(future)
                        bar.update(self._settle(future, spec, failures, stopped, bar.write))
                    steps = ", ".join(
                        f"{s.name} {max(self.step[s.name], _recorded_step(s))}/{_total_steps(s)}"
                        for s in list(self.running.values())[:4]
                        if not self.trained[s.name]
                    )
                    if steps != shown:
                        bar.set_postfix_str(shown := steps, refresh=True)
        finally:
            request.restore()
        return failures, stopped

    def _settle(
        self,
        future: Any,
        spec: RunSpec,
        failures: dict[str, str],
        stopped: dict[str, bool],
        write: Callable[[str], None],
    ) -> int:
        """Record one finished task; returns how many runs it settled (0 or 1)."""
        if future.status == "cancelled":
            failures[spec.name] = "its task was cancelled"
        elif future.status == "error":
            failures[spec.name] = failure_reason(future.exception())
        else:
            result = future.result()
            if result.get("stopped"):
                stopped[spec.name] = bool(result.get("started")) or self.step[spec.name] > 0 or self.trained[spec.name]
                return 1
            if "error" in result:
                failures[spec.name] = result["error"]
            elif "step" in result and not result["complete"] and result["step"] < next_stop(spec, self.step[spec.name]):
                failures[spec.name] = f"a part of its training stopped at step {result['step']} for no reason given"
            elif "step" in result:  # a part of the training
                self.step[spec.name], self.trained[spec.name] = result["step"], result["complete"]
                if result["complete"]:
                    write(f"{spec.name}: trained")
                self.waiting.append(spec)
                self.last = spec.name
                return 0
            else:
                write(f"{spec.name}: sampled and analyzed")
                return 1
        write(f"{spec.name}: failed ({failures[spec.name]})")
        return 1


def failure_reason(error: BaseException) -> str:
    """One line on why a task failed: the error's first line; for a task whose workers kept dying
    (Dask's KilledWorker), what most often kills them here."""
    if type(error).__name__ == "KilledWorker":
        return (
            "the workers that ran its task died each time (out of memory? a local worker above 95 % of "
            "--worker-memory is restarted)"
        )
    return first_line(error, limit=1000)
