"""FedProx's proximal term (Li et al., MLSys 2020, eq. 2): each client adds ``mu/2 ||w - w^t||^2``."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["proximal_term"]


def proximal_term(params: dict[str, Tensor], global_params: dict[str, Tensor], mu: float) -> Tensor:
    """``mu/2 ||w - w^t||^2`` per client: ``params`` are ``(C, *shape)``, ``global_params`` unbatched.

    Returns:
        ``(C,)`` tensor, differentiable with respect to ``params``.

    Example:
        >>> proximal_term({"w": torch.tensor([[1.0, 2.0], [0.0, 0.0]])}, {"w": torch.tensor([1.0, 0.0])}, 0.5)
        tensor([1.0000, 0.2500])
    """
    total = None
    for name, value in params.items():
        sq = (value - global_params[name].unsqueeze(0)).pow(2).flatten(1).sum(1)
        total = sq if total is None else total + sq
    return 0.5 * mu * total if total is not None else torch.zeros(())
