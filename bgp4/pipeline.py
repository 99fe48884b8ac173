"""The whole experiment in one call: simulate, train the preset's generators, sample, refine, analyze.

Every stage that is already complete in the output directory is skipped, so a pipeline that was
stopped can be started again with the same command. `md` settings beyond the preset's choose
another molecule or system (`molecule`, `pdb`, `constraints`, ...). Layout of `out`:
`data/ala2-600K.h5` (another molecule or system: `data_path`),
`runs/<model>/` (each with `samples.h5`, and `samples-refined.h5` where the preset refines the
model's samples by AIS), `report/`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bgp4._io import exclusive
from bgp4.errors import InputError
from bgp4.kinds import KINDS
from bgp4.settings import RefineSettings, SampleSettings, TrainSettings
from bgp4.simulation.md import MDSettings, completed, data_path, simulate

__all__ = ["PRESETS", "NO_PRESET", "get_preset", "preset_train_settings", "data_path", "run_pipeline"]

#: The kinds with spline couplings: the paper preset gives them their own training settings.
_SPLINE_KINDS = tuple(name for name, kind in KINDS.items() if kind.circular)

#: Presets: `quick` shows the main result on 2 CPU cores in minutes; `paper` is the full reproduction.
#: "models" lists the generators a preset trains; "by_model" overrides "train" per kind (the spline
#: kinds take larger, slower steps, so they get fewer of them in the same wall time).
PRESETS: dict[str, dict[str, Any]] = {
    "quick": {
        # 100,000 frames 50 fs apart (5 ns of MD): with 50,000 (1 ns, or 5 ns 100 fs apart) the
        # likelihood phase overfit badly (test NLL -131 after 4,000 steps; -143 with these)
        "md": {"frames": 100_000, "save_every": 25, "equilibration_ps": 20.0},
        # likelihood only: the paper's short energy phase moved no figure in a brief run, and its
        # steps cost 3 likelihood steps each; rnvp and p4inv under 3,000 steps train without torch.compile
        "train": {"steps": 1_500, "energy_steps": 0, "eval_every": 500},
        "sample": {"n": 10_000},
        "models": ("rnvp", "p4inv", "spline"),
        # the best kind: relabelled methyl hydrogens, long enough for torch.compile to pay
        "by_model": {"spline": {"steps": 3_000, "augment": True}},
        # AIS with independence moves alone (energies, no forces): raw ESS 0.09 -> 0.63 at K = 20
        "refine": {"spline": {"levels": 20, "steps": 0}},
    },
    "paper": {
        "md": {},
        "train": {},
        "sample": {"n": 100_000},
        "models": ("rnvp", "p4inv", "spline", "spline-p4inv"),
        # augment: the methyl relabelling lifted the spline flow's test NLL by 0.10 nats and its
        # reverse ESS from 0.61 to 0.75 at the end of the likelihood phase (run/results/spline-48-100ns-augment)
        "by_model": {
            kind: {
                "steps": 6_000,
                "energy_steps": 1_500,
                "batch": 512,
                "energy_weight": 1.0,
                "energy_lr": 3e-5,
                "augment": True,
            }
            for kind in _SPLINE_KINDS
        },
    },
}


#: No preset: every stage at its defaults.
NO_PRESET: dict[str, Any] = {"md": {}, "train": {}, "sample": {}}


def get_preset(name: str) -> dict[str, Any]:
    """The preset `name` from `PRESETS`; InputError naming the choices for any other name."""
    if name not in PRESETS:
        raise InputError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]


def preset_train_settings(preset: str, model: str) -> dict[str, Any]:
    """The `train` settings of `preset` for `model` (common part plus the model's overrides)."""
    p = get_preset(preset)
    return {**p["train"], **p.get("by_model", {}).get(model, {})}


def _refine(
    run: Path, sample: Any, refine: Any, raw_ess: float | None, progress: bool, say: Callable[[str], None]
) -> None:
    """AIS refinement of a run's samples (whose raw reverse ESS is `raw_ess`), as `bgp4 sample RUN
    --refine K` does, with its hint when the refinement went wrong."""
    # lazy: the CLI imports this module at its start (PRESETS), which stays free of torch
    from bgp4.generator.refine import refine_note
    from bgp4.generator.sample import refine_run
    from bgp4.report.analyze import format_number

    summary, refined = refine_run(run, sample, refine.validated(), progress=progress, renew=True)
    say(
        f"refine {run.name}: {'done' if refined else 'complete, skipped'}; AIS with {refine.levels} levels, "
        f"reverse ESS {format_number(summary.get('reverse_ess'))}"
    )
    if note := refine_note(raw_ess, summary, refine.steps):
        say(f"note: {note}")


def _train_settings(
    preset: str, models: tuple[str, ...], resolved_md: MDSettings, data: Path, seed: int, device: str
) -> dict[str, TrainSettings]:
    """Every model's train settings in the preset, checked before the MD stage runs: a bad --device,
    or augment for a molecule without interchangeable hydrogens, is refused before hours of MD."""
    from bgp4.platform import resolve_device
    from bgp4.simulation.atoms import rotor_hydrogens

    trains = {
        m: TrainSettings(data=str(data), model=m, seed=seed, device=device, **preset_train_settings(preset, m))
        for m in models
    }
    for settings in trains.values():
        settings.validated()  # an unknown device name among the rest
    resolve_device(device)  # CUDA without a GPU
    augmented = [m for m, s in trains.items() if s.augment]
    if augmented and not rotor_hydrogens(resolved_md.molecule_object()):
        raise InputError(
            f"the {preset} preset relabels interchangeable hydrogens (augment) for {', '.join(augmented)}, and "
            "this molecule has no such triple (three H on one atom): train it with `bgp4 train` instead"
        )
    return trains


def run_pipeline(
    preset: str,
    out: str | Path,
    seed: int = 0,
    device: str = "auto",
    progress: bool = True,
    say: Callable[[str], None] = print,
    md: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run (or finish) every stage of `preset` into `out`; returns the analysis metrics. `md`:
    MDSettings that replace the preset's (e.g. {"molecule": "alanine-tetrapeptide"})."""
    # lazy: as in _refine
    from bgp4.generator.sample import default_samples_path, sample_run
    from bgp4.generator.train import train
    from bgp4.report.analyze import analyze, format_number

    p = get_preset(preset)
    out = Path(out)
    md_settings = dataclasses.replace(MDSettings(**p["md"]), seed=seed, **(md or {}))
    resolved_md = md_settings.resolved()  # a bad molecule or system is refused before anything is written
    data = data_path(out, md_settings)
    trains = _train_settings(preset, p["models"], resolved_md, data, seed, device)
    if completed(data, md_settings):
        say(f"simulate: {data} is complete, skipped")
    else:
        say(f"simulate: {md_settings.frames} frames -> {data}")
        with exclusive(data):  # as `bgp4 simulate --out DATA` would hold it
            simulate(data, md_settings, progress=progress)

    runs = []
    for model in p["models"]:
        run = out / "runs" / model
        with exclusive(run):  # as `bgp4 train --out RUN` would hold it
            summary, trained = train(trains[model], run, progress=progress)
        say(
            f"train {model}: {'done' if trained else 'complete, skipped'}; test NLL "
            f"{format_number(summary.get('test_nll_end'))}"
        )
        sample_settings = SampleSettings(seed=seed, device=device, **p["sample"])
        with exclusive(default_samples_path(run)):  # as `bgp4 sample RUN` would hold it
            summary, sampled = sample_run(run, sample_settings, progress=progress, renew=True)
            say(
                f"sample {model}: {'done' if sampled else 'complete, skipped'}; {summary.get('samples')} samples, "
                f"mean energy {format_number(summary.get('mean_energy_kT'))} kT, "
                f"reverse ESS {format_number(summary.get('reverse_ess'))}"
            )
            if model in p.get("refine", {}):
                refine = RefineSettings(**p["refine"][model])
                _refine(run, sample_settings, refine, summary.get("reverse_ess"), progress, say)
        runs.append(run)
    metrics = analyze(data, runs, out / "report", seed=seed)
    say(f"analyze: report in {out / 'report' / 'report.md'}")
    return metrics
