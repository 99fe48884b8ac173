"""The training losses: likelihood, reverse KL, the energy phase's mixed loss, FAB's loss on
replay-buffer samples, the P4Inv bound penalty.

Losses in nats per frame or sample; energies u in kT. Used by `bgp4.generator.loop` and
`bgp4.generator.objectives` (training).
"""

from __future__ import annotations

import math

import torch

from bgp4.analysis.weights import reverse_ess
from bgp4.simulation.energy import regularize_energy

__all__ = [
    "FAB_WEIGHT_CLIP",
    "energy_phase_loss",
    "fab_loss",
    "grad_norm",
    "likelihood_loss",
    "p4inv_penalty",
    "reverse_kl_loss",
]

#: FAB: the largest factor q_old(x) / q(x) by which a replay sample's loss term is reweighted
#: (fab-torch's default): a sample whose density fell far since it was stored cannot dominate a batch.
FAB_WEIGHT_CLIP = 10.0


def likelihood_loss(bg, y: torch.Tensor, logdet_cart: torch.Tensor) -> torch.Tensor:
    """The likelihood phase's loss per frame, -log q(x) (B,) in nats, from precomputed flow
    coordinates y (B, n_dims) of frames x and log|dy/dx| (B,) of the coordinate transform."""
    z, logdet_flow = bg.flow.inverse(y)
    return -(bg.prior_log_prob(z) + logdet_flow + logdet_cart)


def p4inv_penalty(layers) -> torch.Tensor:
    """Sum of the P4Inv layers' bound penalties (0-dim): zero while every layer's log|G| and
    log|det A| stay inside its merge bounds (the paper's C_p term; its BG experiment used none)."""
    return torch.stack([layer.penalty() for layer in layers]).sum()


def reverse_kl_loss(u: torch.Tensor, log_q: torch.Tensor, ok: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """Reverse KL (up to log Z) from flow samples: the mean of u + log q over in-domain samples.

    u (B,): energies in kT (+inf where OpenMM could not evaluate), regularized here above 1e3 kT
    (`regularize_energy`: logarithmic growth, so a clash cannot dominate the gradient); log_q (B,)
    nats; ok (B,) bool: in the internal-coordinate domain (elsewhere log q is wrong, so those
    samples are left out; the loss is 0 when there are none). Returns the loss (0-dim, nats) and
    what the metrics log records: reverse_kl, energy mean and 10/50/90 % quantiles over finite
    in-domain samples (kT), the out-of-domain share and the batch's reverse ESS (Kish, with
    log w = -u - log q; zero weight out of the domain).
    """
    # an empty sum keeps the graph (zero gradient), so a batch without in-domain samples still steps
    kl = (regularize_energy(u) + log_q)[ok].mean() if bool(ok.any()) else log_q[ok].sum()
    u_d = u.detach().double()
    finite_u = u_d[ok & torch.isfinite(u_d)]
    log_w = torch.where(ok, -u_d - log_q.detach().double(), torch.full_like(u_d, -math.inf))
    info = {
        "reverse_kl": float(kl.detach()),
        "energy_kT": float(finite_u.mean()) if finite_u.numel() else math.nan,
        "out_of_domain": float((~ok).float().mean()),
        "batch_ess": reverse_ess(log_w.cpu().numpy()),
    }
    quantiles = (
        torch.quantile(finite_u, finite_u.new_tensor([0.1, 0.5, 0.9])).tolist() if finite_u.numel() else [math.nan] * 3
    )
    info.update(zip(("energy_q10_kT", "energy_median_kT", "energy_q90_kT"), quantiles))
    return kl, info


def energy_phase_loss(
    nll: torch.Tensor, u: torch.Tensor, log_q: torch.Tensor, ok: torch.Tensor, energy_weight: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """The mixed objective's loss w_l * NLL + w_e * KL, with w_e / w_l = `energy_weight`, w_l + w_e = 1.

    nll: mean NLL of a data batch (0-dim, nats); u, log_q, ok of flow samples as in
    `reverse_kl_loss`, which gives KL and the infos; train_nll is added to them.
    """
    kl, info = reverse_kl_loss(u, log_q, ok)
    w_l = 1.0 / (1.0 + energy_weight)
    return w_l * nll + (1.0 - w_l) * kl, {"train_nll": float(nll.detach()), **info}


def fab_loss(nll: torch.Tensor, log_q_old: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """FAB's loss on replay-buffer samples drawn in proportion to their AIS weights (towards p^2/q).

    nll (B,): -log q(x) of the drawn samples under the current flow (nats, with gradients);
    log_q_old (B,): log q(x) when each sample's weight was last brought up to date. Each term is
    reweighted by q_old(x) / q(x) (clipped at FAB_WEIGHT_CLIP): the flow changed since the weights
    the draw used. Returns the loss -mean(w log q) (0-dim) and log q_old - log q (B,), the change
    of each sample's log weight (`bgp4.generator.replay.ReplayBuffer.adjust`).
    """
    log_q = -nll
    log_adjust = log_q_old - log_q.detach()
    w = torch.exp(log_adjust).clamp(max=FAB_WEIGHT_CLIP)
    w = torch.where(torch.isfinite(log_adjust), w, torch.zeros_like(w))  # a sample q cannot score: no term
    finite = torch.where(torch.isfinite(log_q), log_q, torch.zeros_like(log_q))
    return -(w * finite).mean(), log_adjust


def grad_norm(parameters) -> torch.Tensor:
    """Total 2-norm of the gradients (0-dim): only its finiteness decides whether a step is applied."""
    parameters = [p for p in parameters if p.grad is not None]
    total_norm = getattr(torch.nn.utils, "get_total_norm", None)  # torch >= 2.6; skips clipping's rescale
    if total_norm is None:
        return torch.nn.utils.clip_grad_norm_(parameters, float("inf"))
    return total_norm([p.grad for p in parameters])
