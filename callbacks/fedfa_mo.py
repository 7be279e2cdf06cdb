"""FedFa-mo: FedFa's double momentum with FedAvg sample-size weights (docs/algorithms.md, FedFa-mo, the ablation)."""

from __future__ import annotations

from lightning_fl.callbacks.fedfa import FedFa
from torch import Tensor

from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.faults.validation import check_choice
from lightning_fl.functional.weights import WEIGHTINGS, fedavg_weights


class FedFaMo(FedFa):
    """FedFa-mo (FedFa paper, Table 3): double momentum only, FedAvg weights ``n_k / sum n``.

    docs/algorithms.md, FedFa-mo: ``w_agg = sum_k n_k y_k / sum_k n_k``; then exactly :class:`FedFa`'s server
    momentum in descent form: ``g = w^t - w_agg``; ``heavy_ball`` ``m <- gamma_s m + g`` or ``ema``
    ``m <- gamma_s m + (1 - gamma_s) g``, ``w^{t+1} = w^t - eta_s m`` when ``(t + 1) % b == 0``, else
    ``w_agg``; ``arxiv`` (arXiv eqs. 5-7) ``m <- gamma_s m + (1 - gamma_s) g`` and ``w^{t+1} = w_agg - eta_s m``
    on those rounds. ``period_mode: every_round`` updates ``m`` every round, ``per_period`` only on apply
    rounds with ``g = w^{t+1-b} - w_agg``. Client momentum comes from the optimizer config
    (``SGD(momentum=...)``). The paper's sign of the server momentum is flipped to the descent form
    (see :class:`FedFa`). With ``server_momentum = 0``, ``period = 1`` and ``heavy_ball``/``ema`` this is
    FedAvg. No training accuracy is used, so no extra forward pass is made.

    TensorBoard: ``server/weights`` and ``server/weights_figure`` (histogram and bar chart of ``n_k / sum n``) and
    ``server/momentum_norm``, with the round number as step.

    Args:
        server_momentum: ``gamma_s`` in ``[0, 1]``. Default 0.5.
        server_lr: ``eta_s > 0``. Default 1.0.
        period: ``b >= 1``. Default 1.
        momentum_form: ``heavy_ball`` (default), ``ema`` or ``arxiv``.
        weighting: ``samples`` (default, ``n_k / sum n``) or ``uniform`` (``1 / K``).
        figure_every_n_rounds: Log the weights bar chart every this many rounds (0: never). Default 1.
        period_mode: ``every_round`` (default) or ``per_period``.

    Raises:
        ConfigError: On ``server_momentum`` outside ``[0, 1]``, ``server_lr <= 0``, ``period < 1`` or an
            unknown ``momentum_form``/``weighting``/``period_mode``.

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
        period_mode: str = "every_round",
    ) -> None:
        super().__init__(alpha=0.5, beta=0.5, server_momentum=server_momentum, server_lr=server_lr, period=period,
                         momentum_form=momentum_form, figure_every_n_rounds=figure_every_n_rounds,
                         period_mode=period_mode, train_acc="running")
        check_choice("weighting", weighting, WEIGHTINGS)
        self.weighting = weighting
        del self.alpha, self.beta, self.train_acc  # not used by the ablation (no accuracy: no extra pass)

    def client_weights(self, update: CohortUpdate, like: Tensor) -> tuple[Tensor, bool]:
        weights, degenerate = fedavg_weights(update.num_samples.to(like.device), self.weighting)
        return weights.to(like.dtype), degenerate
