"""Adaptive server optimizers FedAdam, FedYogi and FedAdagrad (docs/algorithms.md, FedAdam / FedYogi / FedAdagrad; Reddi et al. 2021)."""

from __future__ import annotations

from typing import ClassVar

from lightning_fl.aggregation.server_optimizers import ServerAdagrad, ServerAdam, ServerAdaptive, ServerYogi
from lightning_fl.callbacks.fedavg import FedAvg

#: The server-optimizer stage of each kind.
SERVER_STEPS: dict[str, type[ServerAdaptive]] = {"adam": ServerAdam, "yogi": ServerYogi, "adagrad": ServerAdagrad}


class AdaptiveServerOptimizer(FedAvg):
    """Shared implementation of FedAdam / FedYogi / FedAdagrad; use one of the three subclasses.

    docs/algorithms.md, FedAdam / FedYogi / FedAdagrad (Reddi et al. 2021, Algorithm 2, no bias correction), each round::

        w_avg = sum_k n_k y_k / sum_k n_k        (FedAvg aggregate)
        D = w_avg - w^t
        m <- b1 m + (1 - b1) D
        v <- b2 v + (1 - b2) D^2                  (FedAdam)
        v <- v - (1 - b2) D^2 sign(v - D^2)       (FedYogi; sign of the previous v, sign(0) = 0)
        v <- v + D^2                              (FedAdagrad; b2 unused)
        w^{t+1} = w^t + eta m / (sqrt(v) + tau)

    Math: :func:`lightning_fl.functional.server_optimizers.adaptive_server_step`.

    Readings (the paper leaves them open; see the functional module):

    - Initial state ``m = 0`` and ``v = tau^2`` (the smallest ``v_{-1}`` Reddi et al.'s Algorithm 2
      allows), not ``v = 0``.
    - FedAdagrad gets the same first moment ``m`` as the other two, as docs/algorithms.md writes it (``b1 = 0``
      gives the momentum-free Adagrad of some libraries).
    - ``w_avg`` is FedAvg's aggregate, with FedAvg's ``weighting`` option; a sample-count
      normalisation that sums to 0 falls back to uniform weights and warns once (docs/algorithms.md, Server arithmetic).
    - ``m`` and ``v`` are fp32 on the global model's device and are checkpointed, so a resumed run
      continues exactly. The server step needs only each member's weights and sample count, so it
      also combines institution models in hierarchy mode.

    TensorBoard (step = round number ``t + 1``): ``server/m_norm`` (``||m||_2``) and ``server/v_mean``
    (mean of ``v``), after the update.

    Args:
        lr: Server learning rate ``eta > 0``. Default 0.01.
        beta1: ``b1`` in ``[0, 1]``. Default 0.9.
        beta2: ``b2`` in ``[0, 1]``. Default 0.99.
        tau: Adaptivity ``tau > 0``. Default ``1e-3``.
        weighting: ``samples`` (``n_k / sum n``, default) or ``uniform``, as in :class:`~lightning_fl.callbacks.FedAvg`.

    Raises:
        ConfigError: If ``lr <= 0``, ``tau <= 0``, ``beta1``/``beta2`` outside ``[0, 1]`` or
            ``weighting`` unknown.
    """

    logged_scalars = ("server/m_norm", "server/v_mean")

    #: ``adam``, ``yogi`` or ``adagrad``: set by each subclass.
    kind: ClassVar[str] = ""
    supports_hierarchy = True

    def __init__(self, lr: float = 0.01, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3,
                 weighting: str = "samples") -> None:
        super().__init__(weighting)
        if not self.kind:
            raise TypeError("use lightning_fl.callbacks.FedAdam, lightning_fl.callbacks.FedYogi or lightning_fl.callbacks.FedAdagrad")
        self.lr, self.beta1, self.beta2, self.tau = float(lr), float(beta1), float(beta2), float(tau)
        # The stage checks the arguments; m and v (d,) are its declared state, saved under the callback's name.
        self.server_optimizer = SERVER_STEPS[self.kind](lr, beta1, beta2, tau)


class FedAdam(AdaptiveServerOptimizer):
    """FedAdam (Reddi et al. 2021): ``v <- b2 v + (1 - b2) D^2`` (docs/algorithms.md, FedAdam / FedYogi / FedAdagrad).

    Everything else, defaults and readings as in :class:`AdaptiveServerOptimizer`:
    ``D = w_avg - w^t``; ``m <- b1 m + (1 - b1) D``; ``w^{t+1} = w^t + eta m / (sqrt(v) + tau)``;
    ``m = 0``, ``v = tau^2`` initially; defaults ``lr = 0.01, beta1 = 0.9, beta2 = 0.99, tau = 1e-3``.

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.FedAdam
              init_args: {lr: 0.01, beta1: 0.9, beta2: 0.99, tau: 0.001}
    """

    kind = "adam"


class FedYogi(AdaptiveServerOptimizer):
    """FedYogi (Reddi et al. 2021): ``v <- v - (1 - b2) D^2 sign(v - D^2)`` (docs/algorithms.md, FedAdam / FedYogi / FedAdagrad).

    ``sign`` is taken of the previous ``v`` minus ``D^2`` (``sign(0) = 0``). Everything else, defaults
    and readings as in :class:`AdaptiveServerOptimizer`: ``D = w_avg - w^t``;
    ``m <- b1 m + (1 - b1) D``; ``w^{t+1} = w^t + eta m / (sqrt(v) + tau)``; ``m = 0``, ``v = tau^2``
    initially; defaults ``lr = 0.01, beta1 = 0.9, beta2 = 0.99, tau = 1e-3``.

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.FedYogi
              init_args: {lr: 0.01}
    """

    kind = "yogi"


class FedAdagrad(AdaptiveServerOptimizer):
    """FedAdagrad (Reddi et al. 2021): ``v <- v + D^2`` (docs/algorithms.md, FedAdam / FedYogi / FedAdagrad; ``beta2`` is unused).

    Everything else, defaults and readings as in :class:`AdaptiveServerOptimizer`:
    ``D = w_avg - w^t``; ``m <- b1 m + (1 - b1) D`` (the same first moment as FedAdam, as docs/algorithms.md
    writes it; ``beta1 = 0`` for momentum-free Adagrad); ``w^{t+1} = w^t + eta m / (sqrt(v) + tau)``;
    ``m = 0``, ``v = tau^2`` initially; defaults ``lr = 0.01, beta1 = 0.9, tau = 1e-3``.

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.FedAdagrad
              init_args: {lr: 0.01}
    """

    kind = "adagrad"
