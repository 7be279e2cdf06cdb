"""FedFa-mo: FedFa's double momentum with FedAvg sample-size weights (docs/algorithms.md, FedFa-mo, the ablation)."""

from __future__ import annotations

from lightning_fl.callbacks.fedfa import FedFa
from torch import Tensor

from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.functional.weights import WEIGHTINGS, fedavg_weights
from lightning_fl.validation import check_choice


class FedFaMo(FedFa):
    """FedFa-mo (FedFa paper, Table 3): double momentum only, FedAvg weights ``n_k / sum n``.

    docs/algorithms.md, FedFa-mo: ``w_agg = sum_k n_k y_k / sum_k n_k``; then exactly :class:`FedFa`'s server
    momentum in descent form: ``g = w^t - w_agg``; ``heavy_ball`` ``m <- gamma_s m + g`` or ``ema``
    ``m <- gamma_s m + (1 - gamma_s) g``, updated every round; ``w^{t+1} = w^t - eta_s m`` when
    ``(t + 1) % b == 0``, else ``w_agg``. Client momentum comes from the optimizer config
    (``SGD(momentum=...)``). The paper's sign of the server momentum is flipped to the descent form
    (see :class:`FedFa`). With ``server_momentum = 0`` and ``period = 1`` this is FedAvg.

    TensorBoard: ``server/weights`` and ``server/weights_figure`` (histogram and bar chart of ``n_k / sum n``) and
    ``server/momentum_norm``, with the round number as step.

    Args:
        server_momentum: ``gamma_s`` in ``[0, 1]``. Default 0.5.
        server_lr: ``eta_s > 0``. Default 1.0.
        period: ``b >= 1``. Default 1.
        momentum_form: ``heavy_ball`` (default) or ``ema``.
        weighting: ``samples`` (default, ``n_k / sum n``) or ``uniform`` (``1 / K``).
        figure_every_n_rounds: Log the weights bar chart every this many rounds (0: never). Default 1.

    Raises:
        ConfigError: On ``server_momentum`` outside ``[0, 1]``, ``server_lr <= 0``, ``period < 1`` or an
            unknown ``momentum_form``/``weighting``.

    Example (YAML)::

        - class_path: lightning_fl.callbacks.FedFaMo
          init_args: {server_momentum: 0.5}
    """

    weights_title = "FedFa-mo weights"

    def __init__(
        self,
        server_momentum: float = 0.5,
        server_lr: float = 1.0,
        period: int = 1,
        momentum_form: str = "heavy_ball",
        weighting: str = "samples",
        figure_every_n_rounds: int = 1,
    ) -> None:
        super().__init__(alpha=0.5, beta=0.5, server_momentum=server_momentum, server_lr=server_lr, period=period,
                         momentum_form=momentum_form, figure_every_n_rounds=figure_every_n_rounds)
        check_choice("weighting", weighting, WEIGHTINGS)
        self.weighting = weighting
        del self.alpha, self.beta  # not used by the ablation

    def client_weights(self, update: CohortUpdate, like: Tensor) -> tuple[Tensor, bool]:
        weights, degenerate = fedavg_weights(update.num_samples.to(like.device), self.weighting)
        return weights.to(like.dtype), degenerate
