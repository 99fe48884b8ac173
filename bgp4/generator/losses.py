"""The training objectives: likelihood, the energy phase's mixed loss, the P4Inv bound penalty.

Losses in nats per frame or sample; energies u in kT. Used by `bgp4.generator.loop` (training).
"""

from __future__ import annotations

import math

import torch

from bgp4.simulation.energy import regularize_energy

__all__ = ["energy_phase_loss", "grad_norm", "likelihood_loss", "p4inv_penalty"]


def likelihood_loss(bg, y: torch.Tensor, logdet_cart: torch.Tensor) -> torch.Tensor:
    """The likelihood phase's loss per frame, -log q(x) (B,) in nats, from precomputed flow
    coordinates y (B, n_dims) of frames x and log|dy/dx| (B,) of the coordinate transform."""
    z, logdet_flow = bg.flow.inverse(y)
    return -(bg.prior_log_prob(z) + logdet_flow + logdet_cart)


def p4inv_penalty(layers) -> torch.Tensor:
    """Sum of the P4Inv layers' bound penalties (0-dim): zero while every layer's log|G| and
    log|det A| stay inside its merge bounds (the paper's C_p term; its BG experiment used none)."""
    return torch.stack([layer.penalty() for layer in layers]).sum()


def energy_phase_loss(
    nll: torch.Tensor, u: torch.Tensor, log_q: torch.Tensor, ok: torch.Tensor, energy_weight: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """The energy phase's loss w_l * NLL + w_e * KL, with w_e / w_l = `energy_weight`, w_l + w_e = 1.

    nll: mean NLL of a data batch (0-dim, nats); u (B,): energies of flow samples in kT (+inf
    where OpenMM could not evaluate), regularized here; log_q (B,) nats; ok (B,) bool: in the
    internal-coordinate domain. KL = mean of u + log q over the in-domain samples only (elsewhere
    log q is wrong); 0 when there are none. Returns the loss and what the metrics log records
    (energy mean and 10/50/90 % quantiles over finite in-domain samples, in kT).
    """
    # samples outside the internal-coordinate domain have a wrong log q: keep them out of the KL
    kl = (regularize_energy(u) + log_q)[ok].mean() if bool(ok.any()) else nll.new_zeros(())
    w_l = 1.0 / (1.0 + energy_weight)
    loss = w_l * nll + (1.0 - w_l) * kl
    finite_u = u.detach()[ok & torch.isfinite(u)].double()
    info = {
        "train_nll": float(nll.detach()),
        "reverse_kl": float(kl.detach()),
        "energy_kT": float(finite_u.mean()) if finite_u.numel() else math.nan,
        "out_of_domain": float((~ok).float().mean()),
    }
    quantiles = (
        torch.quantile(finite_u, finite_u.new_tensor([0.1, 0.5, 0.9])).tolist() if finite_u.numel() else [math.nan] * 3
    )
    info.update(zip(("energy_q10_kT", "energy_median_kT", "energy_q90_kT"), quantiles))
    return loss, info


def grad_norm(parameters) -> torch.Tensor:
    """Total 2-norm of the gradients (0-dim): only its finiteness decides whether a step is applied."""
    parameters = [p for p in parameters if p.grad is not None]
    total_norm = getattr(torch.nn.utils, "get_total_norm", None)  # torch >= 2.6; skips clipping's rescale
    if total_norm is None:
        return torch.nn.utils.clip_grad_norm_(parameters, float("inf"))
    return total_norm([p.grad for p in parameters])
