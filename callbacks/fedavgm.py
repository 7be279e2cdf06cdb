"""FedAvgM: FedAvg with server momentum (docs/algorithms.md, FedAvgM)."""

from __future__ import annotations

import torch
from lightning_fl.callbacks.fedavg import FedAvg
from torch import Tensor
from typing_extensions import override

from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.federation import Federation
from lightning_fl.functional.server_optimizers import fedavgm_step
from lightning_fl.round_logger import RoundLogger
from lightning_fl.validation import check_positive, check_range


class FedAvgM(FedAvg):
    """FedAvgM (Hsu et al. 2019): heavy-ball server momentum on the FedAvg pseudo-gradient.

    docs/algorithms.md, FedAvgM, each round::

        w_avg = sum_k n_k y_k / sum_k n_k        (FedAvg aggregate)
        g = w^t - w_avg                           (pseudo-gradient)
        v <- beta v + g
        w^{t+1} = w^t - eta_s v

    The velocity ``v`` starts at zeros (the first step is ``w^t - eta_s g``; with ``eta_s = 1`` that
    is FedAvg), is kept in fp32 on the global model's device and is checkpointed, so a resumed run
    continues exactly. With ``beta = 0`` and ``server_lr = 1`` this is FedAvg. Math:
    :func:`lightning_fl.functional.server_optimizers.fedavgm_step`.

    Readings: ``w_avg`` is FedAvg's aggregate, with FedAvg's ``weighting`` option; a sample-count
    normalisation that sums to 0 falls back to uniform weights and warns once (docs/algorithms.md, Server arithmetic). The
    server step needs only each member's weights and sample count, so it also combines institution
    models in hierarchy mode.

    TensorBoard (step = round number ``t + 1``): ``server/velocity_norm`` (``||v||_2`` after the update).

    Args:
        beta: Server momentum ``beta`` in ``[0, 1]``. Default 0.9.
        server_lr: Server learning rate ``eta_s > 0``. Default 1.0.
        weighting: ``samples`` (``n_k / sum n``, default) or ``uniform``, as in :class:`~lightning_fl.callbacks.FedAvg`.

    Raises:
        ConfigError: If ``beta`` is outside ``[0, 1]``, ``server_lr <= 0`` or ``weighting`` is unknown.

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.FedAvgM
              init_args: {beta: 0.9, server_lr: 1.0}
    """

    logged_scalars = ("server/velocity_norm",)

    supports_hierarchy = True

    def __init__(self, beta: float = 0.9, server_lr: float = 1.0, weighting: str = "samples") -> None:
        super().__init__(weighting)
        check_range("beta", beta, 0.0, 1.0)
        check_positive("server_lr", server_lr)
        self.beta = float(beta)
        self.server_lr = float(server_lr)
        self.add_server_state("velocity")  # (d,) after the first round

    @override
    def aggregate(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                  log: RoundLogger) -> Tensor:
        avg_w = self.average(round_idx, global_w, update)
        new_w, self.velocity = fedavgm_step(global_w, avg_w, None if self.velocity is None else self.velocity.to(global_w), self.beta,
                                            self.server_lr)
        log.log_scalars({"server/velocity_norm": float(torch.linalg.vector_norm(self.velocity))})
        return new_w
