"""SCAFFOLD (Karimireddy et al. 2020), option II control variates (docs/algorithms.md, SCAFFOLD).

State: a server control ``c`` (``(d,)``) and one control ``c_k`` per client, all zeros at start.

- Client, every local step: the gradient ``g`` is replaced by ``g - c_k + c``
  (:func:`scaffold_correct_grad`).
- Client, after ``tau_k`` local steps with client learning rate ``eta_l`` (option II):
  ``c_k+ = c_k - c + (w^t - y_k) / (tau_k eta_l)`` (:func:`scaffold_client_control`).
- Server: ``w^{t+1} = w^t + eta_g mean_k(y_k - w^t)`` (an unweighted mean over the cohort, as in the
  paper) and ``c <- c + (1/N) sum_k (c_k+ - c_k)`` with ``N`` the total number of clients
  (:func:`scaffold_server_step`). Default ``eta_g = 1``.

Readings documented here:

- A client that took no local step (``tau_k == 0``, e.g. an empty local dataset) has no estimate of
  its gradient; its control is left unchanged (``c_k+ = c_k``) instead of dividing 0 by 0.
- ``eta_l`` is the client optimizer's learning rate; with client momentum or a learning-rate schedule
  option II is the paper's approximation all the same (the callback passes the configured ``lr``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fl.functional.weights import broadcast_per_client

__all__ = ["scaffold_client_control", "scaffold_correct_grad", "scaffold_server_step"]


def scaffold_correct_grad(grad: Tensor, c_k: Tensor, c: Tensor) -> Tensor:
    """The corrected local gradient ``g - c_k + c`` (docs/algorithms.md, SCAFFOLD).

    Works unchanged with a leading cohort dimension (``grad`` and ``c_k`` of shape ``(C, ...)``, ``c``
    of shape ``(...)``) because it is plain broadcasting.

    Args:
        grad: Stochastic gradient ``g`` of the client loss.
        c_k: The client's control variate.
        c: The server control variate.

    Returns:
        ``grad - c_k + c`` (a new tensor).

    Example:
        >>> scaffold_correct_grad(torch.tensor([1.0]), torch.tensor([0.5]), torch.tensor([0.25]))
        tensor([0.7500])
    """
    return grad - c_k + c


def scaffold_client_control(
    c_k: Tensor,
    c: Tensor,
    global_w: Tensor,
    y_k: Tensor,
    num_steps: Tensor | int,
    lr: float,
) -> Tensor:
    """Option II control update ``c_k+ = c_k - c + (w^t - y_k) / (tau_k eta_l)`` (docs/algorithms.md, SCAFFOLD).

    Args:
        c_k: The client's control, ``(d,)``, or ``(K, d)`` for a whole cohort.
        c: The server control ``c`` used this round, ``(d,)``.
        global_w: ``w^t``, ``(d,)``.
        y_k: The client's final weights, same shape as ``c_k``.
        num_steps: ``tau_k``: an int, or a ``(K,)`` tensor matching a cohort-shaped ``c_k``.
        lr: Client learning rate ``eta_l`` (> 0).

    Returns:
        ``c_k+`` with ``c_k``'s shape. Clients with ``tau_k == 0`` keep ``c_k``.

    Raises:
        ValueError: If ``lr <= 0``.

    Example:
        >>> scaffold_client_control(torch.zeros(1), torch.zeros(1), torch.tensor([1.0]),
        ...                         torch.tensor([0.8]), 2, 0.1)
        tensor([1.0000])
    """
    if not lr > 0:
        raise ValueError(f"lr must be > 0; got {lr!r}")
    steps = broadcast_per_client(num_steps, c_k)
    drift = (global_w - y_k) / (steps.clamp_min(1) * lr)
    updated = c_k - c + drift
    return torch.where(steps > 0, updated, c_k)


def scaffold_server_step(
    global_w: Tensor,
    client_w: Tensor,
    c: Tensor,
    delta_c_sum: Tensor,
    num_clients_total: int,
    server_lr: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """SCAFFOLD server update (docs/algorithms.md, SCAFFOLD).

    Args:
        global_w: ``w^t``, ``(d,)``.
        client_w: ``(K, d)`` cohort weights ``y_k``.
        c: Server control ``c``, ``(d,)``.
        delta_c_sum: ``sum_k (c_k+ - c_k)`` over the cohort, ``(d,)``; a ``(K, d)`` tensor of the
            individual ``c_k+ - c_k`` is also accepted and summed over its first dimension.
        num_clients_total: ``N``, the number of clients in the federation (not the cohort size).
        server_lr: ``eta_g`` (default 1).

    Returns:
        ``(new_w, new_c)``.

    Raises:
        ValueError: If ``num_clients_total < 1``.

    Example:
        >>> w, c = scaffold_server_step(torch.zeros(1), torch.tensor([[1.0], [3.0]]), torch.zeros(1),
        ...                             torch.tensor([4.0]), num_clients_total=8)
        >>> w, c
        (tensor([2.]), tensor([0.5000]))
    """
    if num_clients_total < 1:
        raise ValueError(f"num_clients_total must be >= 1; got {num_clients_total!r}")
    if delta_c_sum.dim() == client_w.dim():
        delta_c_sum = delta_c_sum.sum(dim=0)
    new_w = global_w + server_lr * (client_w - global_w).mean(dim=0)
    new_c = c + delta_c_sum / num_clients_total
    return new_w, new_c
