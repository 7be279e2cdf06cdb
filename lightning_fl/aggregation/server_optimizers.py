"""Server optimizers: the last stage, ``w^{t+1}`` from ``w^t`` and the aggregate (docs/algorithms.md, Aggregation pipeline).

Each gets ``w^t`` and ``w_agg = w^t + Δ̃`` (the combined, transformed update) and returns ``w^{t+1}``:
plain (``w^t + eta_s Δ̃``), heavy-ball momentum (FedAvgM: ``g = -Δ̃``) or adaptive (FedAdam, FedYogi,
FedAdagrad: ``D = Δ̃``). Their moments are declared state, checkpointed. The callbacks ``FedAvgM``,
``FedAdam``, ``FedYogi`` and ``FedAdagrad`` are FedAvg's weights with these stages; any other
weighting takes one through ``model.aggregation.server_optimizer`` (e.g. FedAdam on DWFed's weights).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from lightning_fl.aggregation.stage import PipelineStage
from lightning_fl.faults.validation import check_positive, check_range
from lightning_fl.functional.server_optimizers import adaptive_server_step, fedavgm_step
from lightning_fl.reporting.round_logger import RoundLogger


def _on(value: Tensor | None, like: Tensor) -> Tensor | None:
    """``value`` on ``like``'s device and dtype (state restored from a checkpoint may be on the CPU)."""
    return None if value is None else value.to(like)


class ServerOptimizer(PipelineStage):
    """Base of the server optimizers.

    Attributes:
        logged_scalars: The TensorBoard scalars :meth:`step` logs.
    """

    logged_scalars: ClassVar[tuple[str, ...]] = ()

    @property
    def is_plain(self) -> bool:
        """Whether this is ``w^{t+1} = w_agg`` (the plain step with ``eta_s = 1``)."""
        return False

    def step(self, global_w: Tensor, aggregate_w: Tensor, log: RoundLogger) -> Tensor:
        """``w^{t+1}`` from ``w^t`` and ``w_agg``."""
        raise NotImplementedError


class ServerSGD(ServerOptimizer):
    """The plain step ``w^{t+1} = w^t + eta_s (w_agg - w^t)``; with ``lr = 1`` (default) it returns ``w_agg`` itself.

    Args:
        lr: ``eta_s > 0``.
    """

    def __init__(self, lr: float = 1.0) -> None:
        check_positive("server_optimizer.init_args.lr", lr)
        self.lr = float(lr)

    @property
    def is_plain(self) -> bool:
        return self.lr == 1.0

    def step(self, global_w: Tensor, aggregate_w: Tensor, log: RoundLogger) -> Tensor:
        if self.is_plain:
            return aggregate_w
        return global_w + self.lr * (aggregate_w - global_w)


class ServerMomentum(ServerOptimizer):
    """Heavy-ball server momentum (FedAvgM, Hsu et al. 2019): ``v <- beta v + (w^t - w_agg)``; ``w^{t+1} = w^t - eta_s v``.

    State: ``velocity`` (zeros before the first round). Logs ``server/velocity_norm``.

    Args:
        beta: ``beta`` in ``[0, 1]``.
        server_lr: ``eta_s > 0``.
    """

    logged_scalars = ("server/velocity_norm",)

    def __init__(self, beta: float = 0.9, server_lr: float = 1.0) -> None:
        check_range("beta", beta, 0.0, 1.0)
        check_positive("server_lr", server_lr)
        self.beta, self.server_lr = float(beta), float(server_lr)
        self.add_server_state("velocity")

    def step(self, global_w: Tensor, aggregate_w: Tensor, log: RoundLogger) -> Tensor:
        new_w, self.velocity = fedavgm_step(global_w, aggregate_w, _on(self.velocity, global_w), self.beta,
                                            self.server_lr)
        log.log_scalars({"server/velocity_norm": float(torch.linalg.vector_norm(self.velocity))})
        return new_w


class ServerAdaptive(ServerOptimizer):
    """Adaptive server step of Reddi et al. 2021 (docs/algorithms.md, FedAdam / FedYogi / FedAdagrad); use a subclass.

    ``D = w_agg - w^t``; ``m <- b1 m + (1 - b1) D``; ``v`` by the subclass's rule;
    ``w^{t+1} = w^t + eta m / (sqrt(v) + tau)``. State ``m`` and ``v``. Logs ``server/m_norm`` and
    ``server/v_mean``.

    Args:
        lr: ``eta > 0``.
        beta1: ``b1`` in ``[0, 1]``.
        beta2: ``b2`` in ``[0, 1]``.
        tau: ``tau > 0``.
    """

    logged_scalars = ("server/m_norm", "server/v_mean")
    #: ``adam``, ``yogi`` or ``adagrad``: set by each subclass.
    kind: ClassVar[str] = ""

    def __init__(self, lr: float = 0.01, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3) -> None:
        if not self.kind:
            raise TypeError("use lightning_fl.aggregation.ServerAdam, ServerYogi or ServerAdagrad")
        check_positive("lr", lr)
        check_range("beta1", beta1, 0.0, 1.0)
        check_range("beta2", beta2, 0.0, 1.0)
        check_positive("tau", tau)
        self.lr, self.beta1, self.beta2, self.tau = float(lr), float(beta1), float(beta2), float(tau)
        self.add_server_state("m")
        self.add_server_state("v")

    def step(self, global_w: Tensor, aggregate_w: Tensor, log: RoundLogger) -> Tensor:
        out = adaptive_server_step(global_w, aggregate_w, _on(self.m, global_w), _on(self.v, global_w), self.kind,
                                   self.lr, self.beta1, self.beta2, self.tau)
        self.m, self.v = out.m, out.v
        log.log_scalars({"server/m_norm": float(torch.linalg.vector_norm(self.m)), "server/v_mean": float(self.v.mean())})
        return out.new_w


class ServerAdam(ServerAdaptive):
    """FedAdam's server step: ``v <- b2 v + (1 - b2) D^2``."""

    kind = "adam"


class ServerYogi(ServerAdaptive):
    """FedYogi's server step: ``v <- v - (1 - b2) D^2 sign(v - D^2)``."""

    kind = "yogi"


class ServerAdagrad(ServerAdaptive):
    """FedAdagrad's server step: ``v <- v + D^2``."""

    kind = "adagrad"


__all__ = ["ServerAdagrad", "ServerAdam", "ServerAdaptive", "ServerMomentum", "ServerOptimizer", "ServerSGD",
           "ServerYogi"]
