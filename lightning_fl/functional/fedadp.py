"""FedAdp (Wu & Wang 2021): angle-adaptive aggregation weights, Tempo's baseline (docs/algorithms.md, FedAdp).

``g_k = w^t - y_k``; ``g = sum_k p_k g_k`` with ``p_k = n_k / sum_j n_j``;
``theta_k = arccos(cos(g_k, g))`` (radians); smoothed angle
``th_k <- ((m_k - 1) th_k + theta_k) / m_k`` with ``m_k`` the client's participation count including
this round; Gompertz ``f(th) = a (1 - exp(-exp(-a (th - 1))))`` with ``a = 5`` (default);
``psi_k = n_k exp(f(th_k)) / sum_j n_j exp(f(th_j))``; ``w^{t+1} = sum_k psi_k y_k``.

Readings documented here:

- The cosine is clamped to ``[-1, 1]`` before ``arccos`` (round-off can push it just outside).
- A zero vector has no direction: if ``g_k`` or ``g`` is exactly zero the cosine is taken as 0, i.e.
  the angle is ``pi / 2`` ("orthogonal": neither aligned nor opposed). A client that did not move
  therefore gets a neutral, small weight, and a round whose updates cancel (``g = 0``) gives every
  client the same angle, so the weights reduce to ``n_k / sum n`` (FedAvg).
- First participation (``m_k = 1``): the smoothed angle is the instantaneous one; the previous value
  is ignored entirely (it may be a placeholder, even NaN). ``m_k`` must be >= 1.
- ``p_k`` and ``psi_k`` use the uniform fallback (docs/algorithms.md, Server arithmetic), e.g. all ``n_k`` zero.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from lightning_fl.functional.weights import as_float_like, normalize_weights

__all__ = ["FedAdpWeights", "cosine_similarity_rows", "fedadp_weights", "gompertz"]


class FedAdpWeights(NamedTuple):
    """Result of :func:`fedadp_weights`."""

    weights: Tensor
    """``(K,)`` ``psi_k`` (sums to 1)."""
    smoothed_angle: Tensor
    """``(K,)`` updated ``th_k`` to store for each cohort member."""
    instantaneous_angle: Tensor
    """``(K,)`` this round's ``theta_k`` (radians; worth logging)."""
    degenerate: bool
    """A normalisation fell back to uniform: the caller warns once."""


def cosine_similarity_rows(a: Tensor, b: Tensor) -> Tensor:
    """Cosine similarity along the last dimension, 0 where either vector is zero, clamped to [-1, 1].

    Args:
        a: ``(..., d)``.
        b: Broadcastable to ``a``.

    Returns:
        ``(...)`` cosines.

    Example:
        >>> cosine_similarity_rows(torch.tensor([[1.0, 0.0], [0.0, 0.0]]), torch.tensor([1.0, 1.0]))
        tensor([0.7071, 0.0000])
    """
    a, b = torch.broadcast_tensors(a, b)
    dot = (a * b).sum(dim=-1)
    norms = torch.linalg.vector_norm(a, dim=-1) * torch.linalg.vector_norm(b, dim=-1)
    positive = norms > 0
    cos = torch.where(positive, dot / torch.where(positive, norms, torch.ones_like(norms)), torch.zeros_like(dot))
    return cos.clamp(-1.0, 1.0)


def gompertz(theta: Tensor, alpha: float = 5.0) -> Tensor:
    """FedAdp's Gompertz function ``f(th) = a (1 - exp(-exp(-a (th - 1))))``.

    Example:
        >>> round(float(gompertz(torch.tensor(1.0))), 4)  # 5 (1 - e^-1)
        3.1606
    """
    return alpha * (1.0 - torch.exp(-torch.exp(-alpha * (theta - 1.0))))


def fedadp_weights(
    global_w: Tensor,
    client_w: Tensor,
    num_samples: Tensor,
    prev_smoothed_angle: Tensor,
    participation_count: Tensor,
    alpha: float = 5.0,
) -> FedAdpWeights:
    """FedAdp aggregation weights and smoothed angles (docs/algorithms.md, FedAdp).

    Args:
        global_w: ``w^t``, ``(d,)``.
        client_w: ``(K, d)`` cohort weights ``y_k``.
        num_samples: ``(K,)`` ``n_k``.
        prev_smoothed_angle: ``(K,)`` stored ``th_k`` of each cohort member (ignored where
            ``participation_count == 1``).
        participation_count: ``(K,)`` ``m_k``, this round included (>= 1).
        alpha: Gompertz ``a`` (default 5).

    Returns:
        :class:`FedAdpWeights` ``(weights, smoothed_angle, instantaneous_angle, degenerate)``;
        aggregate with ``weighted_average(client_w, weights)``.

    Raises:
        ValueError: If any ``participation_count < 1``.

    Example:
        >>> out = fedadp_weights(torch.zeros(2), torch.tensor([[1.0, 0.0], [1.0, 0.0]]),
        ...                      torch.tensor([1.0, 3.0]), torch.zeros(2), torch.tensor([1, 1]))
        >>> out.weights, out.instantaneous_angle
        (tensor([0.2500, 0.7500]), tensor([0., 0.]))
    """
    counts = as_float_like(participation_count, global_w)
    if bool((counts < 1).any()):
        got = torch.as_tensor(participation_count).tolist()
        raise ValueError(f"participation_count must be >= 1 (this round included); got {got}")
    n = as_float_like(num_samples, global_w)
    p, degenerate_p = normalize_weights(n)
    g_k = global_w - client_w
    g = torch.tensordot(p, g_k, dims=1)
    theta = torch.arccos(cosine_similarity_rows(g_k, g))
    prev = as_float_like(prev_smoothed_angle, global_w)
    # torch.where, not arithmetic: a first-timer's placeholder (possibly NaN) must not leak in.
    smoothed = torch.where(counts > 1, ((counts - 1.0) * prev + theta) / counts, theta)
    psi, degenerate_psi = normalize_weights(n * torch.exp(gompertz(smoothed, alpha)))
    return FedAdpWeights(psi, smoothed, theta, degenerate_p or degenerate_psi)
