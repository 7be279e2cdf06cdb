"""FedAvgM: FedAvg with server momentum (docs/algorithms.md, FedAvgM)."""

from __future__ import annotations

from lightning_fl.aggregation.server_optimizers import ServerMomentum
from lightning_fl.callbacks.fedavg import FedAvg


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
    :func:`lightning_fl.functional.server_optimizers.fedavgm_step`, through the
    :class:`~lightning_fl.aggregation.ServerMomentum` stage.

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
        # The stage checks the arguments; its velocity (d,) is declared state, saved under the callback's name.
        self.server_optimizer = ServerMomentum(beta, server_lr)
        self.beta, self.server_lr = float(beta), float(server_lr)
