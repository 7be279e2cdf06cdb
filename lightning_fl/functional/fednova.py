"""FedNova (Wang et al. 2020): normalised averaging of local updates (docs/algorithms.md, FedNova).

``p_k = n_k / sum_j n_j`` (with the uniform fallback of docs/algorithms.md, Server arithmetic);
``a_k = tau_k`` for plain SGD and, with client momentum ``rho``,
``a_k = (tau_k - rho (1 - rho^tau_k) / (1 - rho)) / (1 - rho)``;
``d_k = (w^t - y_k) / a_k``; ``tau_eff = sum_k p_k a_k``; ``w^{t+1} = w^t - tau_eff sum_k p_k d_k``.

Readings documented here:

- ``a_k`` is the L1 norm of the client's step-weight vector; with ``rho = 0`` the momentum formula
  equals ``tau_k`` exactly (the code takes the plain branch so no round-off is introduced).
- ``rho`` must lie in ``[0, 1)``; the same ``rho`` applies to every client (it comes from the client
  optimizer config).
- A client with ``tau_k == 0`` (no local step) has ``a_k = 0`` and ``y_k = w^t``; its normalised
  update ``d_k`` is taken as 0 instead of ``0 / 0``, and it still counts in ``p_k`` (so it shrinks
  ``tau_eff`` exactly as the formula says).
- ``a_k`` is computed in float64 (``rho^tau`` with large ``tau``) and then cast to the model dtype.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from lightning_fl.functional.weights import as_float_like, normalize_weights

__all__ = ["FedNovaStep", "fednova_normalizer", "fednova_step", "normalized_updates"]


class FedNovaStep(NamedTuple):
    """Result of :func:`fednova_step`."""

    new_w: Tensor
    """``w^{t+1}``, ``(d,)``."""
    tau_eff: Tensor
    """0-d ``sum_k p_k a_k`` (worth logging)."""
    degenerate: bool
    """``p_k`` fell back to uniform (all ``n_k`` zero): the caller warns once."""


def fednova_normalizer(num_steps: Tensor, momentum: float = 0.0) -> Tensor:
    """FedNova's ``a_k`` for each client (docs/algorithms.md, FedNova).

    Args:
        num_steps: ``(K,)`` local step counts ``tau_k`` (any numeric dtype).
        momentum: Client SGD momentum ``rho`` in ``[0, 1)`` (default 0: ``a_k = tau_k``).

    Returns:
        ``(K,)`` ``a_k`` in ``num_steps``' dtype if floating point, else float64.

    Raises:
        ValueError: If ``momentum`` is outside ``[0, 1)``.

    Example:
        >>> fednova_normalizer(torch.tensor([1, 2]), momentum=0.5)
        tensor([1.0000, 2.5000], dtype=torch.float64)
    """
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"momentum must be in [0, 1); got {momentum!r}")
    out_dtype = num_steps.dtype if num_steps.is_floating_point() else torch.float64
    tau = num_steps.to(torch.float64)
    if momentum == 0.0:
        return tau.to(out_dtype)
    rho = momentum
    a = (tau - rho * (1.0 - torch.pow(torch.full_like(tau, rho), tau)) / (1.0 - rho)) / (1.0 - rho)
    return a.to(out_dtype)


def fednova_step(
    global_w: Tensor,
    client_w: Tensor,
    num_samples: Tensor,
    num_steps: Tensor,
    momentum: float = 0.0,
) -> FedNovaStep:
    """One FedNova server step (docs/algorithms.md, FedNova).

    Args:
        global_w: ``w^t``, ``(d,)``.
        client_w: ``(K, d)`` cohort weights ``y_k``.
        num_samples: ``(K,)`` ``n_k``.
        num_steps: ``(K,)`` ``tau_k``.
        momentum: Client SGD momentum ``rho`` (default 0).

    Returns:
        :class:`FedNovaStep` ``(new_w, tau_eff, degenerate)``.

    Raises:
        ValueError: If ``momentum`` is outside ``[0, 1)``.

    Example:
        >>> step = fednova_step(torch.zeros(1), torch.tensor([[-1.0], [-4.0]]), torch.tensor([1.0, 1.0]),
        ...                     torch.tensor([1.0, 4.0]))
        >>> step.new_w, step.tau_eff
        (tensor([-2.5000]), tensor(2.5000))
    """
    p, degenerate = normalize_weights(as_float_like(num_samples, global_w))
    a = as_float_like(fednova_normalizer(num_steps, momentum), global_w)
    d = normalized_updates(global_w - client_w, a)
    tau_eff = (p * a).sum()
    new_w = global_w - tau_eff * torch.tensordot(p, d, dims=1)
    return FedNovaStep(new_w, tau_eff, degenerate)


def normalized_updates(rows: Tensor, a: Tensor) -> Tensor:
    """``rows_k / a_k`` (FedNova's ``d_k``), and 0 for a client with ``a_k = 0`` (it took no step).

    Example:
        >>> normalized_updates(torch.tensor([[2.0], [5.0]]), torch.tensor([2.0, 0.0]))
        tensor([[1.],
                [0.]])
    """
    safe_a = torch.where(a > 0, a, torch.ones_like(a))
    d = rows / safe_a.unsqueeze(1)
    return torch.where((a > 0).unsqueeze(1), d, torch.zeros_like(d))
