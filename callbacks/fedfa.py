"""FedFa: information-quantity weights and server momentum (docs/algorithms.md, FedFa)."""

from __future__ import annotations

import torch
from pytorch_lightning.utilities import rank_zero_info
from torch import Tensor
from typing_extensions import override

from lightning_fl.aggregation.pipeline import Combination
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.faults.validation import (
    ConfigError,
    check_choice,
    check_non_negative,
    check_positive,
    check_range,
)
from lightning_fl.functional.fedfa import (
    MOMENTUM_FORMS,
    PERIOD_MODES,
    fedfa_weights,
    server_momentum_step,
)
from lightning_fl.functional.weights import normalize_weights
from lightning_fl.privacy.mechanism import dp_safe_fedfa_weights
from lightning_fl.reporting.figures import weights_figure
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import AggregationCallback
from lightning_fl.simulation.federation import Federation

#: Where ``train_acc_k`` comes from (docs/algorithms.md, FedFa): the trained ``y_k`` on the full local training
#: set (one extra forward pass), or the running accuracy of the final local epoch (free).
TRAIN_ACC_SOURCES = ("trained", "running")


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
    momentum"); each client reports its training accuracy ``train_acc_k`` and its participation
    count ``f_k`` (rounds it has been in a cohort, this one included). The server, over the cohort only:

    1. ``a_k = train_acc_k / sum_j train_acc_j``; ``f_k' = f_k / sum_j f_j``.
    2. ``Iacc_k = -log2(a_k)`` (``-log2(a_k + c)`` where ``a_k == 0``);
       ``If_k = -log2(1 - f_k')`` (``-log2(1 - f_k' + c)`` where ``1 - f_k' == 0``); ``c = 1e-10``.
    3. ``Iacc_k /= sum Iacc``; ``If_k /= sum If``.
    4. ``weight_k = alpha Iacc_k + beta If_k``; ``w_agg = sum_k weight_k y_k``.
    5. Server momentum, descent form, pseudo-gradient ``g = w^t - w_agg``: ``heavy_ball`` (journal eqs. 3-7)
       ``m <- gamma_s m + g``; ``ema`` ``m <- gamma_s m + (1 - gamma_s) g``; on rounds with
       ``(t + 1) % b == 0`` ``w^{t+1} = w^t - eta_s m``, otherwise ``w^{t+1} = w_agg``. ``arxiv`` (arXiv
       version, eqs. 5-7 and Algorithm 2): ``m <- gamma_s m + (1 - gamma_s) g`` and, on those rounds,
       ``w^{t+1} = w_agg - eta_s m``. ``period_mode: every_round`` updates ``m`` every round;
       ``per_period`` only on those rounds, with the b-round pseudo-gradient ``g = w^{t+1-b} - w_agg``.

    With ``server_momentum = 0``, ``period = 1`` and ``heavy_ball``/``ema`` this is weighted averaging
    with the FedFa weights (bit for bit).

    Readings and notes for users:

    - **``train_acc_k``** (``train_acc``): ``trained`` (default) is the accuracy of the trained local model
      ``y_k`` on the client's full training split, one extra forward pass after local training (a
      straggler's ``y_k`` is what it actually trained); ``running`` is the running accuracy over the
      samples of the final local epoch, from the logits of those training steps (free, but it can
      differ a lot with one local epoch). Which metric: the argmax accuracy of the module's
      ``forward`` logits against the labels (``ClientModule``), never what the module logs in its own
      ``validation_step``/``test_step`` nor ``FairnessMetrics.fairness_metric``.
    - **Frequency term:** it gives *more* weight to clients that have participated more often
      (``-log2(1 - f')`` grows with ``f'``), exactly as eq. 12 is written; the accuracy term gives
      more weight to clients with *lower* training accuracy.
    - **Sign of the server momentum:** the papers' printed sign would undo the clients' progress on
      its first step; we implement the descent form above (docs/algorithms.md, FedFa). ``ema`` is ours
      (neither paper's): the arXiv buffer applied at ``w^t`` as in the journal.
    - ``server_lr`` multiplies the buffer when it is applied, not the pseudo-gradient inside it (the
      two agree for the default ``server_lr = 1``).
    - Degenerate normalisations (all training accuracies 0, a one-client cohort, ...) fall back to
      uniform weights (docs/algorithms.md, Server arithmetic); a warning is logged once except for a one-client cohort,
      whose weight is 1.
    - The momentum buffer (and, with ``per_period``, the period-start model) starts empty and is
      checkpointed, so a resumed run continues exactly, also in the middle of a period.

    TensorBoard (step = round number ``t + 1``): ``server/weights`` (histogram of the cohort's
    weights), ``server/weights_figure`` (their bar chart, every ``figure_every_n_rounds`` rounds) and the scalar
    ``server/momentum_norm`` (``||m||_2`` after the update).

    Args:
        alpha: Weight of the accuracy information, ``>= 0``. Default 0.5.
        beta: Weight of the frequency information, ``>= 0``; ``alpha + beta`` must be 1. Default 0.5.
        server_momentum: ``gamma_s`` in ``[0, 1]``. Default 0.5.
        server_lr: ``eta_s > 0``. Default 1.0.
        period: ``b >= 1``: apply the momentum step every ``b`` rounds. Default 1.
        momentum_form: ``heavy_ball`` (journal, default), ``ema`` (ours) or ``arxiv`` (arXiv version).
        figure_every_n_rounds: Log the weights bar chart every this many rounds (0: never; the
            histogram is logged every round). Default 1.
        period_mode: ``every_round`` (default) or ``per_period`` (see step 5).
        train_acc: ``trained`` (default) or ``running`` (see the notes above).
        dp_safe: The DP-safe variant (ours, not the paper's;
            docs/algorithms.md, Client-level differential privacy): ``a_k = alpha I(acc_k) + beta I(1 - f_k / (t + 1))`` with the bounded
            ``I(x) = min(-log2(max(x, 2^-10)), 10) / 10`` and ``f_k`` the past participations, each in ``[0, 1]``
            and never normalised over the cohort, so ``model.dp`` can sum them over a fixed denominator.
            Without ``model.dp`` the cohort is averaged with ``a_k / sum a``.

    Raises:
        ConfigError: On ``alpha + beta != 1``, a negative ``alpha``/``beta``, ``server_momentum``
            outside ``[0, 1]``, ``server_lr <= 0``, ``period < 1`` or an unknown ``momentum_form``,
            ``period_mode`` or ``train_acc``.

    Example (YAML)::

        model:
          optimizer: {class_path: torch.optim.SGD, init_args: {lr: 0.01, momentum: 0.9}}
        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.FedFa
              init_args: {alpha: 0.5, beta: 0.5, server_momentum: 0.5, period: 1}
    """

    logged_scalars = ("server/momentum_norm",)

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
        period_mode: str = "every_round",
        train_acc: str = "trained",
        dp_safe: bool = False,
    ) -> None:
        super().__init__()
        check_non_negative("alpha", alpha)
        check_non_negative("beta", beta)
        if abs(alpha + beta - 1.0) > 1e-6:
            raise ConfigError(f"alpha + beta must equal 1; got alpha={alpha!r}, beta={beta!r}")
        _check_momentum_args(server_momentum, server_lr, period, momentum_form, figure_every_n_rounds)
        check_choice("period_mode", period_mode, PERIOD_MODES)
        check_choice("train_acc", train_acc, TRAIN_ACC_SOURCES)
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.server_momentum = float(server_momentum)
        self.server_lr = float(server_lr)
        self.period = period
        self.momentum_form = momentum_form
        self.figure_every_n_rounds = figure_every_n_rounds
        self.period_mode = period_mode
        self.train_acc = train_acc
        self.dp_safe = self.dp_own_weights = bool(dp_safe)
        # The engine measures y_k on the full train split only when asked (one extra forward pass).
        self.requires_trained_accuracy = train_acc == "trained"
        self.add_server_state("momentum")  # (d,) after the first round
        # per_period: w^{t+1-b} and the round it was recorded in (which period it belongs to).
        self.add_server_state("period_start")
        self.add_server_state("period_start_round")

    def client_weights(self, update: CohortUpdate, like: Tensor) -> tuple[Tensor, bool]:
        """The cohort's ``(K,)`` aggregation weights (dtype/device of ``like``) and the degenerate flag."""
        accuracy = self._accuracy(update).to(device=like.device, dtype=like.dtype)
        return fedfa_weights(accuracy, update.participation.to(like.device), self.alpha, self.beta)

    def _accuracy(self, update: CohortUpdate) -> Tensor:
        if self.train_acc == "trained":
            if update.trained_acc is None:
                raise RuntimeError("FedFa(train_acc=trained) needs CohortUpdate.trained_acc; the engine did not"
                                   " measure it")
            return update.trained_acc
        return update.train_acc

    @override
    def on_federation_setup(self, federation: Federation) -> None:
        if not federation.optimizer.momentum:
            rank_zero_info(f"{type(self).__name__}: the client optimizer has no momentum; the paper's double"
                           " momentum uses SGD(momentum=...) on the clients (model.optimizer.init_args.momentum)")

    def _period_start(self, round_idx: int, global_w: Tensor) -> Tensor | None:
        """``w^{t+1-b}`` with ``per_period`` (``None`` otherwise), recorded at the period's first aggregation.

        The first aggregation of a period is normally its first round; when earlier rounds of the period
        were empty (no client reported) the global model did not move, so ``w^t`` is still the period's start.
        """
        if self.period_mode != "per_period":
            return None
        if self.period_start is None or self.period_start_round // self.period != round_idx // self.period:
            self.period_start, self.period_start_round = global_w.clone(), round_idx
        return self.period_start.to(global_w)

    @property
    def own_server_optimizer(self) -> bool:  # type: ignore[override]
        """Its momentum is its server step; with ``server_momentum = 0`` another one may replace the plain step."""
        return self.server_momentum > 0

    @override
    def combination(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                    log: RoundLogger) -> Combination:
        if self.dp_safe:  # participation counts this round too: f_k - 1 rounds before it
            own = dp_safe_fedfa_weights(self._accuracy(update), update.participation - 1, round_idx, self.alpha,
                                        self.beta).to(global_w)
            weights, degenerate = normalize_weights(own)
        else:
            own = None
            weights, degenerate = self.client_weights(update, global_w)
        if degenerate:
            self.warn_degenerate_once("weights", round_idx)
        return Combination(weights, own_weights=own)

    @override
    def aggregate(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                  log: RoundLogger) -> Tensor:
        # FedFa's momentum is its own server step (periods, three forms), applied to the pipeline's w_agg.
        combination = self.combination(round_idx, global_w, update, federation, log)
        w_agg = self.combine(round_idx, global_w, update, combination, federation, log)
        if not self.server_optimizer.is_plain:  # model.aggregation.server_optimizer, with server_momentum 0
            log_client_weights(log, combination.p, update.client_ids, self.weights_title, self._figure(round_idx))
            return self.server_optimizer.step(global_w, w_agg, log)
        momentum = None if self.momentum is None else self.momentum.to(global_w)
        new_w, self.momentum = server_momentum_step(
            global_w, w_agg, momentum, round_idx, self.server_momentum, self.server_lr, self.period,
            self.momentum_form, self.period_mode, self._period_start(round_idx, global_w))
        log.log_scalars({"server/momentum_norm": float(torch.linalg.vector_norm(self.momentum))})
        log_client_weights(log, combination.p, update.client_ids, self.weights_title, self._figure(round_idx))
        return new_w

    def _figure(self, round_idx: int) -> bool:
        return self.figure_every_n_rounds > 0 and round_idx % self.figure_every_n_rounds == 0


def _check_momentum_args(server_momentum: float, server_lr: float, period: int, momentum_form: str,
                         figure_every_n_rounds: int) -> None:
    check_range("server_momentum", server_momentum, 0.0, 1.0)
    check_positive("server_lr", server_lr)
    check_positive("period", period, integer=True)
    check_choice("momentum_form", momentum_form, MOMENTUM_FORMS)
    if isinstance(figure_every_n_rounds, bool) or not isinstance(figure_every_n_rounds, int) \
            or figure_every_n_rounds < 0:
        raise ConfigError(f"figure_every_n_rounds must be an integer >= 0; got {figure_every_n_rounds!r}")
