"""FedDyn: dynamic regularisation (Acar et al., ICLR 2021), the worked example of docs/architecture.md."""

from __future__ import annotations

import torch
from torch import Tensor
from typing_extensions import override

from lightning_fl.engines.cohort import CohortUpdate, LocalTrainingContext
from lightning_fl.faults.validation import check_positive
from lightning_fl.functional.feddyn import (
    feddyn_client_state,
    feddyn_local_term,
    feddyn_server_step,
)
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import AggregationCallback
from lightning_fl.simulation.federation import Federation

_CACHE_KEY = "feddyn/grad_k"


class FedDyn(AggregationCallback):
    """FedDyn (Acar et al., ICLR 2021, Algorithm 1): each client's objective tracks the global one.

    Client ``k`` minimises ``L_k(theta) - <g_k, theta> + (alpha/2) ||theta - theta^t||^2`` (a local
    loss term, in both engines); afterwards ``g_k <- g_k - alpha (theta_k - theta^t)``. The server
    keeps ``h <- h - (alpha/N) sum_k (theta_k - theta^t)`` and sets
    ``theta^{t+1} = mean_k theta_k - h / alpha``. Math: :mod:`lightning_fl.functional.feddyn`.

    State: ``h`` (server, ``(d,)``) and ``g_k`` (one ``(d,)`` row per client seen, zeros before), both
    declared, so checkpoints, resume and ``model.client_state: disk`` need no code here. Only
    trainable parameters carry a ``g_k``; buffers are averaged like parameters.

    TensorBoard (step = round number ``t + 1``): ``server/h_norm``.

    Args:
        alpha: Regularisation strength ``alpha > 0`` (the paper tries 0.1, 0.01 and 0.001). Default 0.01.

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.FedDyn
              init_args: {alpha: 0.01}
    """

    composable = False  # its server step adds h / alpha: not a weighted mean of the updates

    logged_scalars = ("server/h_norm",)

    def __init__(self, alpha: float = 0.01) -> None:
        super().__init__()
        check_positive("alpha", alpha)
        self.alpha = float(alpha)
        self.add_server_state("h")  # (d,) after the first round, zeros before
        self.add_client_state("grad_k", shape="model", default=0.0)

    @override
    def on_local_train_start(self, ctx: LocalTrainingContext) -> None:
        like = next(iter(ctx.global_params.values()))
        ctx.cache[_CACHE_KEY] = self.grad_k.gather_by_entry(ctx.client_ids, ctx.layout, like.device)

    @override
    def local_loss_term(self, ctx: LocalTrainingContext, params: dict[str, Tensor]) -> Tensor:
        return feddyn_local_term(params, ctx.global_params, ctx.cache[_CACHE_KEY], self.alpha)

    @override
    def aggregate(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                  log: RoundLogger) -> Tensor:
        trainable = federation.trainable_mask()
        grad_k = self.grad_k.gather(update.client_ids, global_w.device)
        new_grad_k = feddyn_client_state(grad_k, update.weights, global_w, self.alpha)
        self.grad_k.scatter(update.client_ids, torch.where(trainable, new_grad_k, grad_k))
        h = torch.zeros_like(global_w) if self.h is None else self.h.to(global_w)
        new_w, h = feddyn_server_step(global_w, update.weights, h, self.alpha, federation.num_clients)
        # Buffers (no gradient, no g_k): plain average, and no h.
        self.h = torch.where(trainable, h, torch.zeros_like(h))
        new_w = torch.where(trainable, new_w, update.weights.mean(0))
        log.log_scalars({"server/h_norm": float(torch.linalg.vector_norm(self.h))})
        return new_w
