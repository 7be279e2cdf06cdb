"""Aggregation weights: the one normalisation rule every algorithm shares (docs/algorithms.md, Server arithmetic).

docs/algorithms.md, Server arithmetic: a normalisation whose sum of weights is 0, NaN or infinite falls back to uniform
weights over the cohort and is reported so that the caller can log a warning once; it never produces
NaN weights. :func:`normalize_weights` is the only place that rule is written down; every other module
in :mod:`lightning_fl.functional` calls it.

Readings documented here:

- A one-member cohort always gets weight 1. A zero sum there is not reported as degenerate (1 is the
  only possible weight, e.g. FedFa's ``-log2(1) = 0`` information term or a DWFed ISH clamped at 0);
  a NaN or infinite sum still is, because it means the statistics themselves are broken.
- Negative raw weights are not clamped here: only the sum decides. Callers whose raw weights can go
  negative (DWFed's ISH) clamp them first, as their section of docs/algorithms.md says.
- Integer inputs (sample counts, participation counts) are converted to float32, the server dtype of
  docs/algorithms.md, Server arithmetic; floating inputs keep their dtype (tests pass float64 for exact comparisons).

This module also re-exports :func:`check_choice`, the single validator for enumerated options
(``weighting``, ``kind``, ``form``, ``mode``, ``similarity``); it raises
:class:`lightning_fl.faults.validation.ConfigError` (a ``ValueError``) with one line such as
``mode must be one of self, global, time; got 'foo'``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from lightning_fl.faults.validation import ConfigError, check_choice

__all__ = [
    "ConfigError",
    "as_float_like",
    "broadcast_per_client",
    "check_choice",
    "fedavg_weights",
    "normalize_weights",
    "weighted_average",
]

WEIGHTINGS = ("samples", "uniform")


def as_float_like(value: Tensor | Sequence[float] | float, like: Tensor) -> Tensor:
    """Return ``value`` as a tensor with ``like``'s floating dtype and device.

    Per-client statistics arrive as CPU ``LongTensor`` s (participation counts) or Python lists; the
    server math must run in the global model's dtype on its device (docs/algorithms.md, Server arithmetic).

    Args:
        value: A tensor, sequence or scalar.
        like: A floating-point tensor whose dtype and device to use.

    Returns:
        ``value`` converted (a copy only when a conversion is needed).

    Example:
        >>> as_float_like([1, 2], torch.zeros(2, dtype=torch.float64)).dtype
        torch.float64
    """
    return torch.as_tensor(value, device=like.device).to(dtype=like.dtype)


def broadcast_per_client(value: Tensor | Sequence[float] | float, like: Tensor) -> Tensor:
    """A scalar or ``(C,)`` per-client statistic shaped to broadcast over ``like`` of shape ``(C, ...)``.

    A ``(C,)`` tensor becomes ``(C, 1, ..., 1)``; a scalar (or any one-element tensor that is not
    per-client) becomes 0-d. Converted with :func:`as_float_like`.

    Args:
        value: A scalar, or one value per leading-dimension entry of ``like``.
        like: The tensor to broadcast against (its leading dimension is the cohort).

    Returns:
        The reshaped float tensor.

    Raises:
        ValueError: If ``value`` is neither one value nor one value per row of ``like``.

    Example:
        >>> broadcast_per_client(torch.tensor([1, 2]), torch.zeros(2, 3, 4)).shape
        torch.Size([2, 1, 1])
    """
    t = as_float_like(value, like)
    if t.dim() == 1 and like.dim() >= 1 and t.shape[0] == like.shape[0]:
        return t.reshape(t.shape + (1,) * (like.dim() - 1))
    if t.numel() == 1:
        return t.reshape(())
    raise ValueError(
        f"per-client values must be a scalar or have shape ({like.shape[0] if like.dim() else 1},); "
        f"got {tuple(t.shape)}"
    )


def normalize_weights(raw: Tensor) -> tuple[Tensor, bool]:
    """Normalise raw per-client weights to sum 1, with the uniform fallback (docs/algorithms.md, Server arithmetic).

    Args:
        raw: ``(K,)`` non-normalised weights, ``K >= 1``. Integer tensors are converted to float32.

    Returns:
        ``(weights, degenerate)``: ``weights`` is ``raw / raw.sum()`` or, when that sum is 0, NaN or
        infinite, the uniform ``1 / K``. ``degenerate`` is ``True`` when the fallback was used (the
        caller logs a warning once); it stays ``False`` for a one-member cohort whose sum is exactly
        0, because weight 1 is then the only possible answer anyway.

    Raises:
        ValueError: If ``raw`` is not a non-empty 1-D tensor.

    Example:
        >>> normalize_weights(torch.tensor([1.0, 3.0]))
        (tensor([0.2500, 0.7500]), False)
        >>> normalize_weights(torch.tensor([0.0, 0.0]))
        (tensor([0.5000, 0.5000]), True)
    """
    if raw.dim() != 1 or raw.numel() == 0:
        raise ValueError(f"raw weights must be a non-empty 1-D tensor; got shape {tuple(raw.shape)}")
    if not raw.is_floating_point():
        raw = raw.to(torch.float32)
    total = raw.sum()
    # One host sync per round is fine: the flag drives a Python-side warning.
    total_value = float(total)
    finite = math.isfinite(total_value)
    if finite and total_value != 0.0:
        return raw / total, False
    uniform = torch.full_like(raw, 1.0 / raw.numel())
    degenerate = not finite or raw.numel() > 1
    return uniform, degenerate


def weighted_average(client_w: Tensor, weights: Tensor) -> Tensor:
    """``sum_k weights_k * client_w[k]``: the aggregate of a cohort.

    Args:
        client_w: ``(K, d)`` (or ``(K, ...)``) client weights ``y_k``.
        weights: ``(K,)`` weights, usually from :func:`normalize_weights`; cast to ``client_w``'s
            dtype and device (they are not renormalised here).

    Returns:
        The ``(d,)`` (or ``(...)``) weighted sum.

    Raises:
        ValueError: If ``weights`` is not ``(K,)``.

    Example:
        >>> weighted_average(torch.tensor([[0.0, 2.0], [4.0, 6.0]]), torch.tensor([0.75, 0.25]))
        tensor([1., 3.])
    """
    if weights.shape != client_w.shape[:1]:
        raise ValueError(
            f"weights must have shape ({client_w.shape[0]},) to match client_w; got {tuple(weights.shape)}"
        )
    return torch.tensordot(as_float_like(weights, client_w), client_w, dims=1)


def fedavg_weights(num_samples: Tensor, weighting: str = "samples") -> tuple[Tensor, bool]:
    """FedAvg weights ``p_k = n_k / sum_j n_j`` (docs/algorithms.md, FedAvg), or uniform ``1 / K``.

    Args:
        num_samples: ``(K,)`` local training-set sizes ``n_k`` (any numeric dtype).
        weighting: ``"samples"`` (default, ``n_k / sum n``) or ``"uniform"`` (the
            ``weighting: uniform`` option).

    Returns:
        ``(weights, degenerate)`` as from :func:`normalize_weights`; all-zero ``n_k`` falls back to
        uniform and is reported. ``"uniform"`` is never degenerate.

    Raises:
        ConfigError: If ``weighting`` is not one of ``samples``, ``uniform``.

    Example:
        >>> fedavg_weights(torch.tensor([10.0, 30.0]))
        (tensor([0.2500, 0.7500]), False)
    """
    check_choice("weighting", weighting, WEIGHTINGS)
    if weighting == "uniform":
        dtype = num_samples.dtype if num_samples.is_floating_point() else torch.float32
        return normalize_weights(torch.ones(num_samples.shape, dtype=dtype, device=num_samples.device))
    return normalize_weights(num_samples)
