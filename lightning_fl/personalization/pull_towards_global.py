"""A client hook that pulls the trained model towards ``w^t``: Ditto's personal objective, FedAvg-FT's ``ft_prox``."""

from __future__ import annotations

from torch import Tensor
from typing_extensions import override

from lightning_fl.engines.cohort import LocalTrainingContext
from lightning_fl.engines.hooks import ClientHooks
from lightning_fl.functional.ditto import ditto_pull


class PullTowardsGlobal(ClientHooks):
    """Adds ``lambda (v - w^t)`` (the gradient of ``lambda/2 ||v - w^t||^2``, ``w^t`` fixed) to every gradient.

    In place, as SCAFFOLD corrects gradients, rather than through autograd: the vectorized engine's
    hand-written path then needs no graph (docs/algorithms.md, Personalization, Ditto).

    Args:
        lam: ``lambda >= 0``; 0 adds nothing.
    """

    row_wise_correction = True  # a row's pull needs only that row and w^t

    def __init__(self, lam: float) -> None:
        self.lam = float(lam)

    @override
    def correct_local_gradients(self, ctx: LocalTrainingContext, params: dict[str, Tensor],
                                grads: dict[str, Tensor]) -> None:
        if not self.lam:
            return
        for name, grad in grads.items():
            if grad.dtype == params[name].dtype:  # lambda v - lambda w^t in place: no (C, ...) temporaries
                grad.add_(params[name], alpha=self.lam).sub_(ctx.global_params[name].unsqueeze(0), alpha=self.lam)
            else:
                grad.add_(ditto_pull(params[name], ctx.global_params[name], self.lam).to(grad.dtype))
