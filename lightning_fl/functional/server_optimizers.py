"""Server optimizers on the FedAvg pseudo-gradient: FedAvgM and FedAdam / FedYogi / FedAdagrad.

docs/algorithms.md, FedAvgM; FedAdam / FedYogi / FedAdagrad. Every function takes the global model ``w^t`` (``(d,)``), the cohort average
``w_avg`` (``(d,)``, e.g. :func:`~lightning_fl.functional.weights.weighted_average` of the client
weights) and the optimizer state, and returns the new global model and the new state; nothing is
modified in place.

FedAvgM (Hsu et al. 2019): ``g = w^t - w_avg``; ``v <- beta v + g``; ``w^{t+1} = w^t - eta_s v``.
Defaults ``beta = 0.9``, ``eta_s = 1``. The velocity starts at zeros.

FedAdam / FedYogi / FedAdagrad (Reddi et al. 2021, Algorithm 2, no bias correction):
``D = w_avg - w^t``; ``m <- b1 m + (1 - b1) D`` (all three kinds, as docs/algorithms.md writes it: Adagrad gets the
same first moment); Adam ``v <- b2 v + (1 - b2) D^2``; Yogi
``v <- v - (1 - b2) D^2 sign(v - D^2)`` (``sign`` of the *previous* ``v``; ``sign(0) = 0``);
Adagrad ``v <- v + D^2``; ``w^{t+1} = w^t + eta m / (sqrt(v) + tau)``.
Defaults ``eta = 0.01, b1 = 0.9, b2 = 0.99, tau = 1e-3``.

Initial state (the paper leaves it open): ``m_{-1} = 0`` and ``v_{-1} = tau^2``. Reddi et al.'s Algorithm 2
initialises with ``v_{-1} >= tau^2``; we take the smallest value it allows (see
:func:`init_adaptive_state`, used when ``m`` / ``v`` are ``None``). Callers who want the zero
initialisation of some other libraries pass ``torch.zeros_like(global_w)`` explicitly; both are
finite because ``tau > 0`` keeps the denominator away from 0.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from lightning_fl.functional.weights import check_choice

__all__ = ["ADAPTIVE_KINDS", "AdaptiveStep", "adaptive_server_step", "fedavgm_step", "init_adaptive_state"]

ADAPTIVE_KINDS = ("adam", "yogi", "adagrad")


class AdaptiveStep(NamedTuple):
    """Result of :func:`adaptive_server_step`."""

    new_w: Tensor
    """``w^{t+1}``, ``(d,)``."""
    m: Tensor
    """Updated first moment."""
    v: Tensor
    """Updated second moment."""


def fedavgm_step(
    global_w: Tensor,
    avg_w: Tensor,
    velocity: Tensor | None,
    beta: float = 0.9,
    server_lr: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """One FedAvgM server step (docs/algorithms.md, FedAvgM).

    Args:
        global_w: ``w^t``, ``(d,)``.
        avg_w: FedAvg aggregate ``w_avg``, ``(d,)``.
        velocity: Momentum buffer ``v`` from the previous round, or ``None`` for zeros (round 0).
        beta: Server momentum (default 0.9).
        server_lr: ``eta_s`` (default 1).

    Returns:
        ``(new_w, new_velocity)``.

    Example:
        >>> w, v = fedavgm_step(torch.tensor([1.0]), torch.tensor([0.5]), None)
        >>> w, v
        (tensor([0.5000]), tensor([0.5000]))
    """
    g = global_w - avg_w  # pseudo-gradient: descent direction is -g
    new_velocity = g if velocity is None else beta * velocity + g
    return global_w - server_lr * new_velocity, new_velocity


def init_adaptive_state(global_w: Tensor, tau: float = 1e-3) -> tuple[Tensor, Tensor]:
    """Initial ``(m, v)`` for :func:`adaptive_server_step`: ``m = 0``, ``v = tau^2`` (Reddi et al.).

    Args:
        global_w: Template for shape, dtype and device.
        tau: Adaptivity ``tau`` (default ``1e-3``).

    Returns:
        ``(m, v)``.

    Example:
        >>> init_adaptive_state(torch.zeros(2), tau=0.5)
        (tensor([0., 0.]), tensor([0.2500, 0.2500]))
    """
    return torch.zeros_like(global_w), torch.full_like(global_w, tau * tau)


def adaptive_server_step(
    global_w: Tensor,
    avg_w: Tensor,
    m: Tensor | None,
    v: Tensor | None,
    kind: str,
    lr: float = 0.01,
    beta1: float = 0.9,
    beta2: float = 0.99,
    tau: float = 1e-3,
) -> AdaptiveStep:
    """One FedAdam / FedYogi / FedAdagrad server step (docs/algorithms.md, FedAdam / FedYogi / FedAdagrad; Reddi et al. 2021, Alg. 2).

    Args:
        global_w: ``w^t``, ``(d,)``.
        avg_w: FedAvg aggregate ``w_avg``, ``(d,)``.
        m: First moment from the previous round, or ``None`` for the initial ``0``.
        v: Second moment from the previous round, or ``None`` for the initial ``tau^2``.
        kind: ``"adam"``, ``"yogi"`` or ``"adagrad"``.
        lr: Server learning rate ``eta`` (default 0.01).
        beta1: ``b1`` (default 0.9).
        beta2: ``b2`` (default 0.99; unused by Adagrad).
        tau: Adaptivity ``tau`` (default ``1e-3``), must be > 0.

    Returns:
        :class:`AdaptiveStep` ``(new_w, m, v)``.

    Raises:
        ConfigError: If ``kind`` is not one of ``adam``, ``yogi``, ``adagrad``.
        ValueError: If ``tau <= 0``.

    Example:
        >>> step = adaptive_server_step(torch.zeros(1), torch.ones(1), None, None, "adagrad", lr=1.0,
        ...                             beta1=0.0)
        >>> round(float(step.new_w), 4)  # m = D = 1, v = tau^2 + 1: 1 / (sqrt(1 + 1e-6) + 1e-3)
        0.999
    """
    check_choice("kind", kind, ADAPTIVE_KINDS)
    if not tau > 0:
        raise ValueError(f"tau must be > 0; got {tau!r}")
    if m is None or v is None:
        m0, v0 = init_adaptive_state(global_w, tau)
        m = m0 if m is None else m
        v = v0 if v is None else v
    delta = avg_w - global_w
    delta_sq = delta * delta
    new_m = beta1 * m + (1.0 - beta1) * delta
    if kind == "adam":
        new_v = beta2 * v + (1.0 - beta2) * delta_sq
    elif kind == "yogi":
        # Yogi moves v towards D^2 by an additive (1 - b2) D^2 step, never overshooting its sign.
        new_v = v - (1.0 - beta2) * delta_sq * torch.sign(v - delta_sq)
    else:
        new_v = v + delta_sq
    new_w = global_w + lr * new_m / (new_v.sqrt() + tau)
    return AdaptiveStep(new_w, new_m, new_v)
