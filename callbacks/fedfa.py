"""FedFa: information-quantity weights and server momentum (docs/algorithms.md, FedFa)."""

from __future__ import annotations

import torch
from pytorch_lightning.utilities import rank_zero_info
from torch import Tensor
from typing_extensions import override

from lightning_fl.callback import AggregationCallback
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.federation import Federation
from lightning_fl.functional.fedfa import (
    MOMENTUM_FORMS,
    fedfa_weights,
    server_momentum_step,
)
from lightning_fl.reporting.figures import weights_figure
from lightning_fl.round_logger import RoundLogger
from lightning_fl.validation import (
    ConfigError,
    check_choice,
    check_non_negative,
    check_positive,
    check_range,
)


def log_client_weights(log: RoundLogger, weights: Tensor, client_ids: Tensor, title: str, figure: bool) -> None:
    """Log ``(K,)`` aggregation weights: histogram ``server/weights``, bar chart ``server/weights_figure`` when ``figure``.

    The step is the round number ``t + 1`` (``log.step``): the weights produced ``w^{t+1}``.
    """
    log.log_histogram("server/weights", weights.detach().float())
    if figure:
        log.log_figure("server/weights_figure", weights_figure(weights, client_ids.tolist(), log.step, title))


class FedFa(AggregationCallback):
    r"""FedFa (fairness and accuracy, Information Sciences 2022): information weights + double momentum.

    docs/algorithms.md, FedFa (paper eqs. 3-15). The client side is plain local training with the momentum
    optimizer of the config (``model.optimizer: torch.optim.SGD(momentum=gamma_c)``, "client
    momentum"); each client reports its final-epoch training accuracy ``train_acc_k`` and its
    participation count ``f_k`` (rounds it has been in a cohort, this one included). The server,
    over the cohort only:

    1. ``a_k = train_acc_k / sum_j train_acc_j``; ``f_k' = f_k / sum_j f_j``.
    2. ``Iacc_k = -log2(a_k)`` (``-log2(a_k + c)`` where ``a_k == 0``);
       ``If_k = -log2(1 - f_k')`` (``-log2(1 - f_k' + c)`` where ``1 - f_k' == 0``); ``c = 1e-10``.
    3. ``Iacc_k /= sum Iacc``; ``If_k /= sum If``.
    4. ``weight_k = alpha Iacc_k + beta If_k``; ``w_agg = sum_k weight_k y_k``.
    5. Server momentum, descent form: ``g = w^t - w_agg``; ``heavy_ball``: ``m <- gamma_s m + g``;
       ``ema``: ``m <- gamma_s m + (1 - gamma_s) g``. ``m`` is updated every round; when
       ``(t + 1) % b == 0`` then ``w^{t+1} = w^t - eta_s m``, otherwise ``w^{t+1} = w_agg``.

    With ``server_momentum = 0`` and ``period = 1`` this is weighted averaging with the FedFa
    weights (bit for bit).

    Readings and notes for users:

    - **Frequency term:** it gives *more* weight to clients that have participated more often
      (``-log2(1 - f')`` grows with ``f'``), exactly as eq. 12 is written; the accuracy term gives
      more weight to clients with *lower* training accuracy.
    - **Sign of the server momentum:** the paper's printed sign would undo the clients' progress on
      its first step; we implement the descent form above (docs/algorithms.md, FedFa).
    - ``server_lr`` multiplies the buffer when it is applied, not the pseudo-gradient inside it (the
      two agree for the default ``server_lr = 1``).
    - Degenerate normalisations (all training accuracies 0, a one-client cohort, ...) fall back to
      uniform weights (docs/algorithms.md, Server arithmetic); a warning is logged once except for a one-client cohort,
      whose weight is 1.
    - The momentum buffer starts at zero and is checkpointed, so a resumed run continues exactly.

    TensorBoard (step = round number ``t + 1``): ``server/weights`` (histogram of the cohort's
    weights), ``server/weights_figure`` (their bar chart, every ``figure_every_n_rounds`` rounds) and the scalar
    ``server/momentum_norm`` (``||m||_2`` after the update).

    Args:
        alpha: Weight of the accuracy information, ``>= 0``. Default 0.5.
        beta: Weight of the frequency information, ``>= 0``; ``alpha + beta`` must be 1. Default 0.5.
        server_momentum: ``gamma_s`` in ``[0, 1]``. Default 0.5.
        server_lr: ``eta_s > 0``. Default 1.0.
        period: ``b >= 1``: apply the momentum step every ``b`` rounds. Default 1.
        momentum_form: ``heavy_ball`` (journal, default) or ``ema`` (ours; docs/algorithms.md, FedFa).
        figure_every_n_rounds: Log the weights bar chart every this many rounds (0: never; the
            histogram is logged every round). Default 1.

    Raises:
        ConfigError: On ``alpha + beta != 1``, a negative ``alpha``/``beta``, ``server_momentum``
            outside ``[0, 1]``, ``server_lr <= 0``, ``period < 1`` or an unknown ``momentum_form``.

    Example (YAML)::

        model:
          optimizer: {class_path: torch.optim.SGD, init_args: {lr: 0.01, momentum: 0.9}}
        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.FedFa
              init_args: {alpha: 0.5, beta: 0.5, server_momentum: 0.5, period: 1}
    """

    #: Title of the weights chart.
    weights_title = "FedFa weights"

    supports_reduce = True  # only weighted sums of the clients' weights (model.exchange: reduce)

    def __init__(
        self,
        alpha: float = 0.5,
        beta: float = 0.5,
        server_momentum: float = 0.5,
        server_lr: float = 1.0,
        period: int = 1,
        momentum_form: str = "heavy_ball",
        figure_every_n_rounds: int = 1,
    ) -> None:
        super().__init__()
        check_non_negative("alpha", alpha)
        check_non_negative("beta", beta)
        if abs(alpha + beta - 1.0) > 1e-6:
            raise ConfigError(f"alpha + beta must equal 1; got alpha={alpha!r}, beta={beta!r}")
        _check_momentum_args(server_momentum, server_lr, period, momentum_form, figure_every_n_rounds)
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.server_momentum = float(server_momentum)
        self.server_lr = float(server_lr)
        self.period = period
        self.momentum_form = momentum_form
        self.figure_every_n_rounds = figure_every_n_rounds
        self.add_server_state("momentum")  # (d,) after the first round

    def client_weights(self, update: CohortUpdate, like: Tensor) -> tuple[Tensor, bool]:
        """The cohort's ``(K,)`` aggregation weights (dtype/device of ``like``) and the degenerate flag."""
        train_acc = update.train_acc.to(device=like.device, dtype=like.dtype)
        return fedfa_weights(train_acc, update.participation.to(like.device), self.alpha, self.beta)

    @override
    def on_federation_setup(self, federation: Federation) -> None:
        if not federation.optimizer.momentum:
            rank_zero_info(f"{type(self).__name__}: the client optimizer has no momentum; the paper's double"
                           " momentum uses SGD(momentum=...) on the clients (model.optimizer.init_args.momentum)")

    @override
    def aggregate(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                  log: RoundLogger) -> Tensor:
        weights, degenerate = self.client_weights(update, global_w)
        if degenerate:
            self.warn_degenerate_once("weights", round_idx)
        w_agg = update.weighted_sum(weights)
        momentum = None if self.momentum is None else self.momentum.to(global_w)
        new_w, self.momentum = server_momentum_step(global_w, w_agg, momentum, round_idx, self.server_momentum,
                                                    self.server_lr, self.period, self.momentum_form)
        log.log_scalars({"server/momentum_norm": float(torch.linalg.vector_norm(self.momentum))})
        figure = self.figure_every_n_rounds > 0 and round_idx % self.figure_every_n_rounds == 0
        log_client_weights(log, weights, update.client_ids, self.weights_title, figure)
        return new_w


def _check_momentum_args(server_momentum: float, server_lr: float, period: int, momentum_form: str,
                         figure_every_n_rounds: int) -> None:
    check_range("server_momentum", server_momentum, 0.0, 1.0)
    check_positive("server_lr", server_lr)
    check_positive("period", period, integer=True)
    check_choice("momentum_form", momentum_form, MOMENTUM_FORMS)
    if isinstance(figure_every_n_rounds, bool) or not isinstance(figure_every_n_rounds, int) \
            or figure_every_n_rounds < 0:
        raise ConfigError(f"figure_every_n_rounds must be an integer >= 0; got {figure_every_n_rounds!r}")
