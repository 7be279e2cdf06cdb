"""q-FFL / q-FedAvg (Li et al. 2020), the fair-resource-allocation server step (docs/algorithms.md, q-FFL).

``L = 1 / eta_l`` (the client learning rate), ``F_k = loss_before_k + 1e-10`` (the loss of ``w^t``
on client ``k``'s training set, measured before local training);
``dw_k = L (w^t - y_k)``; ``D_k = F_k^q dw_k``; ``h_k = q F_k^(q-1) ||dw_k||^2 + L F_k^q``;
``w^{t+1} = w^t - sum_k D_k / sum_k h_k``. Default ``q = 1``.

Readings documented here:

- ``||dw_k||^2`` is the squared L2 norm of the whole flattened update.
- ``q = 0`` reduces to ``h_k = L`` and ``w^{t+1} = w^t - mean_k (w^t - y_k) = mean_k y_k``: the
  *unweighted* average of the cohort (q-FedAvg never weights by ``n_k``).
- The common factor ``max_j F_j^q`` is divided out of numerator and denominator before summing. The
  ratio is unchanged, but ``F^q`` can no longer overflow (e.g. ``F = 100, q = 20`` in fp32).
- ``loss_before`` must be >= 0 (a cross-entropy); ``F_k > 0`` then keeps ``sum h_k > 0`` so no
  fallback is needed.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fl.functional.weights import as_float_like

__all__ = ["QFFL_EPSILON", "qffl_combination", "qffl_step"]

QFFL_EPSILON = 1e-10


def qffl_step(global_w: Tensor, client_w: Tensor, loss_before: Tensor, lr: float, q: float = 1.0) -> Tensor:
    """One q-FFL server step (docs/algorithms.md, q-FFL).

    Args:
        global_w: ``w^t``, ``(d,)``.
        client_w: ``(K, d)`` cohort weights ``y_k``.
        loss_before: ``(K,)`` loss of ``w^t`` on each client's training set (>= 0).
        lr: Client learning rate ``eta_l`` (> 0); ``L = 1 / lr``.
        q: Fairness exponent ``q >= 0`` (default 1).

    Returns:
        ``w^{t+1}``, ``(d,)``.

    Raises:
        ValueError: If ``lr <= 0`` or ``q < 0``.

    Example:
        >>> qffl_step(torch.zeros(1), torch.tensor([[1.0], [3.0]]), torch.tensor([1.0, 1.0]), lr=1.0, q=0.0)
        tensor([2.])
    """
    r, dw, h = _terms(global_w, client_w, loss_before, lr, q)
    numerator = torch.tensordot(r, dw, dims=1)
    return global_w - numerator / h.sum()


def qffl_combination(global_w: Tensor, client_w: Tensor, loss_before: Tensor, lr: float,
                     q: float = 1.0) -> tuple[Tensor, Tensor, Tensor]:
    """q-FFL as ``(p, s)`` of the aggregation pipeline, and its own step, from one pass over the updates.

    ``p_k = F_k^q / sum F^q`` and ``s = L sum F^q / sum h``: ``w^t + s sum_k p_k (y_k - w^t)`` is the q-FFL
    step (to float rounding), and a robust rule replaces the weighted sum; ``h`` is always computed from
    the raw updates. The third value is :func:`qffl_step`'s ``w^{t+1}``, bitwise.

    Example:
        >>> p, s, new_w = qffl_combination(torch.zeros(1), torch.tensor([[1.0], [3.0]]), torch.tensor([1.0, 1.0]),
        ...                                1.0, 0.0)
        >>> p, s, new_w
        (tensor([0.5000, 0.5000]), tensor(1.), tensor([2.]))
    """
    r, dw, h = _terms(global_w, client_w, loss_before, lr, q)
    new_w = global_w - torch.tensordot(r, dw, dims=1) / h.sum()
    return r / r.sum(), (1.0 / lr) * r.sum() / h.sum(), new_w


def _terms(global_w: Tensor, client_w: Tensor, loss_before: Tensor, lr: float, q: float) -> tuple[Tensor, Tensor, Tensor]:
    """``(r, dw, h)``: ``r_k = F_k^q / max F^q``, ``dw_k = L (w^t - y_k)`` and ``h_k / max F^q``."""
    if not lr > 0:
        raise ValueError(f"lr must be > 0; got {lr!r}")
    if not q >= 0:
        raise ValueError(f"q must be >= 0; got {q!r}")
    lipschitz = 1.0 / lr
    f = as_float_like(loss_before, global_w) + QFFL_EPSILON
    # r_k = F_k^q / max_j F_j^q in (0, 1]; dividing D and h by the same max_j F_j^q keeps the ratio.
    r = torch.pow(f / f.max(), q)
    dw = lipschitz * (global_w - client_w)
    # q F^(q-1) / F_max^q = q r / F
    h = q * (r / f) * dw.pow(2).sum(dim=1) + lipschitz * r
    return r, dw, h
