"""Ditto's personal objective (Li et al. ICML 2021, Alg. 1; docs/algorithms.md, Personalization, Ditto)."""

from __future__ import annotations

from torch import Tensor

__all__ = ["ditto_pull"]


def ditto_pull(v: Tensor, w: Tensor, lam: float) -> Tensor:
    """``lambda (v - w^t)``: the gradient of ``lambda/2 ||v - w^t||^2``, added to ``v``'s data gradient.

    ``v`` is ``(C, *shape)`` (one personal model per client), ``w`` the unbatched global entry.

    Example:
        >>> import torch
        >>> ditto_pull(torch.tensor([[1.0, 3.0]]), torch.tensor([0.5, 1.0]), 2.0)
        tensor([[1., 4.]])
    """
    return lam * (v - w.unsqueeze(0))
