"""The generator kinds and the training objectives, in one registry each: what settings validate,
what the model builder builds, what the training loop does and what the sweep's dispatch weighs.

A kind is a frozen `GeneratorKind`; look one up with `get_kind(name)`, which refuses an unknown
name with the list of the known ones. Everything else that depends on the kind (settings'
defaults, the torsion representation, whether P4Inv layers are built, a training step's cost)
reads it from here rather than comparing names.

    >>> get_kind("spline-p4inv").circular, get_kind("spline-p4inv").p4inv
    (True, True)
    >>> get_kind("rnvp").architecture(blocks=3)
    {'blocks': 3, 'hidden': 60}

An objective is a frozen `ObjectiveKind`, looked up the same way with `get_objective(name)`:

    >>> get_objective("fab").data_free, get_objective("mixed").energy_lr
    (True, 1e-05)
"""

from __future__ import annotations

from dataclasses import dataclass

from bgp4.errors import InputError

__all__ = [
    "DEFAULT_OBJECTIVE",
    "GeneratorKind",
    "KINDS",
    "OBJECTIVE_KINDS",
    "ObjectiveKind",
    "get_kind",
    "get_objective",
    "kind_names",
]


@dataclass(frozen=True)
class GeneratorKind:
    """One kind of Boltzmann generator.

    Attributes:
        name: the name settings, files and the CLI use ("rnvp", ...).
        blocks, hidden: default blocks of 2 couplings and hidden width of the coupling nets.
        bins: default spline bins; 0 for kinds without spline couplings.
        circular: torsions are circular coordinates of rational-quadratic spline couplings
            (the spline kinds); otherwise logit-mapped and coupled affinely.
        p4inv: the flow has P4Inv layers (they get a P4InvScheduler in training).
        step_cost: rough cost of one training step per batch frame, relative to rnvp (CPU step
            times of the studies in run/results/); the sweep orders its tasks by it.
        compile_min_steps: steps that evaluate the likelihood (likelihood steps plus mixed or fab
            energy steps) from which `--compile auto` compiles on CPU, about
            where the compile time (30-70 s) is won back by faster steps (run/bench/bench_flow.py:
            break-even near 2,700-2,900 steps for the RNVP kinds, 600-860 for the spline kinds).
    """

    name: str
    blocks: int
    hidden: int
    bins: int
    circular: bool
    p4inv: bool
    step_cost: float
    compile_min_steps: int

    @property
    def torsions(self) -> str:
        """The coordinate transform's torsion representation: "circular" or "logit"."""
        return "circular" if self.circular else "logit"

    @property
    def defaults(self) -> dict[str, int]:
        """{blocks, hidden[, bins]} of this kind when a setting is 0 (bins for spline kinds only)."""
        out = {"blocks": self.blocks, "hidden": self.hidden}
        if self.bins:
            out["bins"] = self.bins
        return out

    def architecture(self, blocks: int = 0, hidden: int = 0, bins: int = 0) -> dict[str, int]:
        """{blocks, hidden[, bins]} with zeros replaced by this kind's defaults."""
        out = {"blocks": blocks or self.blocks, "hidden": hidden or self.hidden}
        if self.bins:
            out["bins"] = bins or self.bins
        return out


#: Every kind, by name, in the order the CLI and settings list them. The paper's two (appendix F
#: defaults), then the circular spline flows (bgp4.generator.model builds them).
KINDS: dict[str, GeneratorKind] = {
    k.name: k
    for k in (
        GeneratorKind(
            "rnvp", blocks=25, hidden=60, bins=0, circular=False, p4inv=False, step_cost=1.0, compile_min_steps=3000
        ),
        GeneratorKind(
            "p4inv", blocks=25, hidden=60, bins=0, circular=False, p4inv=True, step_cost=1.6, compile_min_steps=3000
        ),
        GeneratorKind(
            "spline", blocks=6, hidden=256, bins=8, circular=True, p4inv=False, step_cost=6.0, compile_min_steps=1000
        ),
        GeneratorKind(
            "spline-p4inv",
            blocks=6,
            hidden=256,
            bins=8,
            circular=True,
            p4inv=True,
            step_cost=6.5,
            compile_min_steps=1000,
        ),
    )
}


def kind_names() -> tuple[str, ...]:
    """The names of all kinds, in registry order."""
    return tuple(KINDS)


def get_kind(name: str, what: str = "generator kind") -> GeneratorKind:
    """The kind called `name`; InputError ("unknown <what> ...; choose one of ...") for any other name."""
    try:
        return KINDS[name]
    except (KeyError, TypeError):
        raise InputError(f"unknown {what} {name!r}; choose one of {', '.join(KINDS)}") from None


@dataclass(frozen=True)
class ObjectiveKind:
    """What the second (energy) phase of a training run trains.

    Attributes:
        name: the name settings and the CLI use ("ml", "mixed", "kl", "fab").
        energy_lr: the energy phase's learning rate when `--energy-lr` is 0; None for ml (no
            energy phase).
        data_free: it trains without MD frames (from `--init` or from the molecule's structure),
            and its gradients are clipped by default.
        nll_in_energy_phase: its energy steps go through the likelihood of a batch (mixed: MD
            frames; fab: replay-buffer samples), so they count towards `--compile auto`.
        md_in_energy_phase: its energy steps draw MD frames (the paper's mixed loss).
        flow_ess_key: the metrics-log key of the ESS of the flow's own samples, which the training
            figure draws (fab logs `flow_ess`; kl logs its batches' `batch_ess`).
    """

    name: str
    energy_lr: float | None
    data_free: bool
    nll_in_energy_phase: bool
    md_in_energy_phase: bool
    flow_ess_key: str = "flow_ess"


#: Every objective, by name: ml (likelihood only), mixed (the paper's w_l NLL + w_e reverse KL),
#: kl (reverse KL alone), fab (flow annealed importance sampling bootstrap).
OBJECTIVE_KINDS: dict[str, ObjectiveKind] = {
    o.name: o
    for o in (
        ObjectiveKind("ml", None, data_free=False, nll_in_energy_phase=False, md_in_energy_phase=False),
        ObjectiveKind("mixed", 1e-5, data_free=False, nll_in_energy_phase=True, md_in_energy_phase=True),
        ObjectiveKind(
            "kl", 1e-4, data_free=True, nll_in_energy_phase=False, md_in_energy_phase=False, flow_ess_key="batch_ess"
        ),
        ObjectiveKind("fab", 1e-4, data_free=True, nll_in_energy_phase=True, md_in_energy_phase=False),
    )
}
#: The objective of a settings record that names none (the paper's, and every run before the option).
DEFAULT_OBJECTIVE = "mixed"


def get_objective(name: str) -> ObjectiveKind:
    """The objective called `name`; InputError naming the option and the known ones for any other."""
    try:
        return OBJECTIVE_KINDS[name]
    except (KeyError, TypeError):
        raise InputError(f"objective (--objective) must be one of {', '.join(OBJECTIVE_KINDS)}, got {name!r}") from None
