"""What the energy phase of a run trains (`TrainSettings.objective`): one class per objective.

- `MixedObjective` (mixed, the paper's): w_l * NLL of an MD batch + w_e * reverse KL of flow samples.
- `ReverseKLObjective` (kl): reverse KL alone, E_q[u(x) + log q(x)] from the flow's own samples
  (reparameterized), u regularized above 1e3 kT; no MD data.
- `FabObjective` (fab): flow annealed importance sampling bootstrap (Midgley et al., ICLR 2023):
  AIS from q towards p^2/q (`bgp4.generator.fab`) fills a prioritized replay buffer
  (`bgp4.generator.replay`); every step draws a batch from it in proportion to the weights and
  minimizes -mean(w log q); every `reuse` steps a new AIS batch joins the buffer; no MD data.

The likelihood phase before it (`steps`) is the loop's own. Each objective's `loss(energy)` gives
the loss, the infos the metrics log records and the target energy evaluations it spent; its
`state_dict` holds whatever a checkpoint needs beyond the loop's counters and sample stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch

from bgp4.errors import Bgp4Error
from bgp4.generator.fab import FabSampler
from bgp4.generator.losses import energy_phase_loss, fab_loss, reverse_kl_loss
from bgp4.generator.replay import ReplayBuffer

if TYPE_CHECKING:
    from bgp4.generator.model import BoltzmannGenerator
    from bgp4.settings import TrainSettings

__all__ = ["FabObjective", "MixedObjective", "Objective", "ReverseKLObjective", "fab_min_buffer", "make_objective"]

#: loss(energy) -> (loss (0-dim), infos, target energy evaluations)
Step = tuple[torch.Tensor, dict[str, float], int]
#: (flow coordinates y (B, dims), log|dy/dx| (B,)) -> -log q(x) (B,) nats: the likelihood of a batch
BatchNLL = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class Objective:
    """The energy phase's loss; objectives without state of their own keep these defaults."""

    name = ""

    def loss(self, energy) -> Step:
        """(loss, infos, target energy evaluations) of one step; `energy` maps positions (nm) to
        reduced energies u (kT), the OpenMM bridge (`bgp4.simulation.energy.OpenMMEnergy`)."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None


class ReverseKLObjective(Objective):
    """Reverse KL from `batch` flow samples per step, drawn from `sample_gen` (`reverse_kl_loss`)."""

    name = "kl"

    def __init__(self, bg: BoltzmannGenerator, batch: int, sample_gen: torch.Generator):
        self.bg, self.batch, self.sample_gen = bg, batch, sample_gen

    def samples(self, energy) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """u (B,) kT, log q (B,) nats and in-domain flags (B,) of `batch` flow samples."""
        x, log_q, ok, _ = self.bg.sample(self.batch, generator=self.sample_gen)
        return energy.reduced_energy(x), log_q, ok  # u: +inf where OpenMM could not evaluate

    def loss(self, energy) -> Step:
        u, log_q, ok = self.samples(energy)
        loss, info = reverse_kl_loss(u, log_q, ok)
        return loss, info, len(u)


class MixedObjective(ReverseKLObjective):
    """The paper's energy phase: `energy_phase_loss` of an MD batch's NLL (`data_nll()`, mean
    nats) and the reverse KL of flow samples, with w_e / w_l = `energy_weight`."""

    name = "mixed"

    def __init__(
        self,
        bg: BoltzmannGenerator,
        batch: int,
        sample_gen: torch.Generator,
        data_nll: Callable[[], torch.Tensor],
        energy_weight: float,
    ):
        super().__init__(bg, batch, sample_gen)
        self.data_nll, self.energy_weight = data_nll, energy_weight

    def loss(self, energy) -> Step:
        nll = self.data_nll()  # first: the batch stream is drawn before the sample stream, as always
        u, log_q, ok = self.samples(energy)
        loss, info = energy_phase_loss(nll, u, log_q, ok, self.energy_weight)
        return loss, info, len(u)


def fab_min_buffer(capacity: int, batch: int) -> int:
    """Samples the replay buffer holds before the first draw: an eighth of its capacity (as
    fab-torch's alanine dipeptide setup), at least one batch."""
    return min(capacity, max(batch, capacity // 8))


class FabObjective(Objective):
    """FAB with a prioritized replay buffer (module docstring).

    Each step draws `batch` distinct buffer samples in proportion to their weights and brings
    their weights up to date (`ReplayBuffer.adjust`); every `reuse`-th step (and until the buffer
    holds `fab_min_buffer` samples) one AIS run of `batch` samples towards p^2/q joins it first.
    Random streams: AIS moves and draws from `ais_gen`, buffer draws from `draw_gen` (both kept
    in `state_dict`, with the buffer, the step sizes and the step count).
    """

    name = "fab"

    def __init__(self, bg: BoltzmannGenerator, settings: TrainSettings, nll: BatchNLL, seed: int):
        s = settings
        self.bg, self.batch, self.reuse, self.nll = bg, s.batch, s.fab_reuse, nll
        self.sampler = FabSampler(s.fab_levels, s.fab_moves, s.fab_independence, s.fab_power, s.fab_leapfrog)
        self.buffer = ReplayBuffer(s.fab_buffer, bg.n_dims, fab_min_buffer(s.fab_buffer, s.batch), bg.device)
        self.ais_gen = torch.Generator().manual_seed(seed + 3)  # CPU: the AIS moves draw on the CPU
        self.draw_gen = torch.Generator().manual_seed(seed + 4)
        self.updates = 0

    def fill(self, energy) -> tuple[dict[str, float], int]:
        """Add AIS batches: one, or as many as the buffer needs to be ready; (infos, evaluations)."""
        evaluations, runs, limit = 0, 0, 10 * -(-self.buffer.min_size // self.batch)
        while True:
            ais = self.sampler.run(self.bg, energy, self.batch, self.ais_gen)
            self.buffer.add(ais.y, ais.logdet, ais.log_w, ais.log_q)
            evaluations, runs = evaluations + ais.evaluations, runs + 1
            if self.buffer.ready:
                break
            if runs >= limit:
                raise Bgp4Error(
                    f"FAB: {runs} AIS runs left the replay buffer at {self.buffer.size} usable samples (of "
                    f"{self.buffer.min_size} needed): the flow's samples have no finite energy or density"
                )
        info = {"flow_ess": ais.flow_ess, "ais_ess": ais.ais_ess, "buffer_size": float(self.buffer.size)}
        rates_of = {"ais_acceptance": ais.acceptance, "ais_independence_acceptance": ais.independence_acceptance}
        for key, rates in rates_of.items():
            if np.isfinite(rates).any():  # mean over the levels that ran such moves
                info[key] = float(np.nanmean(rates))
        return info, evaluations

    def loss(self, energy) -> Step:
        info, evaluations = {}, 0
        if self.updates % self.reuse == 0 or not self.buffer.ready:
            info, evaluations = self.fill(energy)
        idx = self.buffer.draw(self.batch, self.draw_gen)
        y, logdet, log_q_old = self.buffer.batch(idx)
        nll = self.nll(y, logdet)
        loss, log_adjust = fab_loss(nll, log_q_old)
        self.buffer.adjust(idx, -nll.detach())
        self.updates += 1
        finite = log_adjust[torch.isfinite(log_adjust)]
        info.update(fab_loss=float(loss.detach()), buffer_nll=float(nll.detach().mean()))
        if finite.numel():
            info["log_weight_adjust"] = float(finite.mean())
        return loss, info, evaluations

    def state_dict(self) -> dict[str, Any]:
        return {
            "replay": self.buffer.state_dict(),
            "sampler": self.sampler.state_dict(),
            "ais_rng": self.ais_gen.get_state(),
            "draw_rng": self.draw_gen.get_state(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state["replay"])
        self.sampler.load_state_dict(state["sampler"])
        self.ais_gen.set_state(state["ais_rng"].cpu())
        self.draw_gen.set_state(state["draw_rng"].cpu())
        self.updates = int(state["updates"])


def make_objective(
    settings: TrainSettings,
    bg: BoltzmannGenerator,
    sample_gen: torch.Generator,
    nll: BatchNLL,
    data_nll: Optional[Callable[[], torch.Tensor]],
) -> Optional[Objective]:
    """The energy phase's objective of validated `settings` (None for ml: there is none).

    sample_gen: the loop's sample stream (mixed and kl); nll: the likelihood of a batch of flow
    coordinates (fab, on buffer samples); data_nll: the mean NLL of an MD batch (mixed).
    """
    s = settings
    if s.objective == "mixed":
        return MixedObjective(bg, s.batch, sample_gen, data_nll, s.energy_weight)
    if s.objective == "kl":
        return ReverseKLObjective(bg, s.batch, sample_gen)
    if s.objective == "fab":
        return FabObjective(bg, s, nll, s.seed)
    return None
