"""FedProx: FedAvg on the server, a proximal term on every client (SPEC section 2)."""

from __future__ import annotations

import torch
from lightning_fl.callbacks.fedavg import FedAvg
from torch import Tensor
from typing_extensions import override

from lightning_fl.engines.cohort import LocalTrainingContext
from lightning_fl.validation import check_non_negative


def proximal_term(params: dict[str, Tensor], global_params: dict[str, Tensor], mu: float) -> Tensor:
    """``mu/2 ||w - w^t||^2`` per client: ``params`` are ``(C, *shape)``, ``global_params`` unbatched.

    Returns:
        ``(C,)`` tensor, differentiable with respect to ``params``.
    """
    total = None
    for name, value in params.items():
        sq = (value - global_params[name].unsqueeze(0)).pow(2).flatten(1).sum(1)
        total = sq if total is None else total + sq
    return 0.5 * mu * total if total is not None else torch.zeros(())


class FedProx(FedAvg):
    """FedProx (Li et al. 2020): each client minimises ``f_k(w) + mu/2 ||w - w^t||^2``.

    The server aggregates exactly as :class:`FedAvg`. The proximal term covers every trainable
    parameter and is added to each local minibatch loss, so its gradient ``mu (w - w^t)`` enters every
    local step.

    Args:
        mu: Proximal coefficient ``mu >= 0`` (``0`` is FedAvg). Default 0.01.
        weighting: Server weighting, as in :class:`FedAvg`.

    Raises:
        ConfigError: If ``mu`` is negative or ``weighting`` unknown.
    """

    def __init__(self, mu: float = 0.01, weighting: str = "samples") -> None:
        super().__init__(weighting)
        check_non_negative("mu", mu)
        self.mu = mu

    @override
    def local_loss_term(self, ctx: LocalTrainingContext, params: dict[str, Tensor]) -> Tensor:
        return proximal_term(params, ctx.global_params, self.mu)
