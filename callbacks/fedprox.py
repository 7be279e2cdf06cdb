"""FedProx: FedAvg on the server, a proximal term on every client (docs/algorithms.md, FedProx)."""

from __future__ import annotations

from lightning_fl.callbacks.fedavg import FedAvg
from torch import Tensor
from typing_extensions import override

from lightning_fl.engines.cohort import LocalTrainingContext
from lightning_fl.faults.validation import check_non_negative
from lightning_fl.functional.fedprox import proximal_term


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
