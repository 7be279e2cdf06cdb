"""q-FFL / q-FedAvg: fair resource allocation (docs/algorithms.md, q-FFL)."""

from __future__ import annotations

import torch
from torch import Tensor
from typing_extensions import override

from lightning_fl.aggregation.pipeline import Combination
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.faults.validation import ConfigError, check_non_negative, check_positive
from lightning_fl.functional.qffl import qffl_combination
from lightning_fl.functional.weights import normalize_weights
from lightning_fl.privacy.mechanism import dp_safe_qffl_weights
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import AggregationCallback
from lightning_fl.simulation.federation import Federation


class QFFL(AggregationCallback):
    """q-FFL / q-FedAvg (Li et al. 2020): clients with a higher loss get a larger share of the update.

    docs/algorithms.md, q-FFL, each round, with ``eta_l`` the client learning rate::

        L = 1 / eta_l
        F_k = loss_before_k + 1e-10      (loss of w^t on client k's train split, before training)
        dw_k = L (w^t - y_k)
        D_k = F_k^q dw_k
        h_k = q F_k^(q-1) ||dw_k||^2 + L F_k^q
        w^{t+1} = w^t - sum_k D_k / sum_k h_k

    The callback sets ``requires_loss_before`` so the engine measures ``loss_before_k`` (one extra
    forward pass over each cohort member's train split per round) as the mean of the client's training
    objective over the split, never what the module logs in ``validation_step`` nor
    ``FairnessMetrics.fairness_metric``: for a :class:`~lightning_fl.models.ClientModule`, its
    ``loss(forward(x), y)`` (cross-entropy by default); for a plain LightningModule, the loss its own
    ``training_step`` returns, run in eval mode without gradient (no dropout; BatchNorm's running
    statistics), sample-weighted over chunks of the split
    (:func:`lightning_fl.engines.evaluation.training_step_losses`), identical in both engines and any
    number of processes. ``F_k`` must be >= 0: a negative ``loss_before_k`` (a ``training_step`` returning
    e.g. a log-likelihood) stops the run with one line. Math: :func:`lightning_fl.functional.qffl.qffl_step`.

    Readings (see the functional module): ``||dw_k||^2`` is over the whole flattened state; the
    aggregate is never weighted by ``n_k`` (``q = 0`` gives the *unweighted* mean of the cohort);
    ``max_j F_j^q`` is divided out of numerator and denominator to avoid overflow. ``F_k > 0`` keeps
    ``sum h_k > 0``, so there is no degenerate normalisation. ``L = 1 / eta_l`` is the Lipschitz
    estimate of plain SGD, so the client optimizer must be ``torch.optim.SGD`` with momentum 0
    (checked before training). Stateless across rounds; needs per-client losses, so it does not run
    in hierarchy mode.

    TensorBoard (step = round number ``t + 1``): ``server/update_norm`` (``||w^{t+1} - w^t||_2``) and
    ``server/loss_before_mean`` (cohort mean of ``loss_before_k``).

    Args:
        q: Fairness exponent ``q >= 0`` (0: unweighted averaging). Default 1.0.
        dp_safe: The DP-safe variant (ours, not the paper's;
            docs/algorithms.md, Client-level differential privacy): ``a_k = (min(F_k, F_max) / F_max)^q`` in ``[0, 1]``, never normalised over the cohort, so
            ``model.dp`` sums them over a fixed denominator; the Lipschitz step normalisation is dropped (a
            server optimizer's lr takes its place) and any client optimizer may be used. Without ``model.dp``
            the cohort is averaged with ``a_k / sum a``.
        f_max: ``F_max > 0``, the declared loss bound of ``dp_safe`` (e.g. the initial model's loss on public data).

    Raises:
        ConfigError: If ``q < 0``; at set-up, if the client optimizer is not ``torch.optim.SGD`` with
            momentum 0.

    Example (YAML)::

        model:
          optimizer: {class_path: torch.optim.SGD, init_args: {lr: 0.01}}
        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.QFFL
              init_args: {q: 1.0}
    """

    logged_scalars = ("server/update_norm", "server/loss_before_mean")

    requires_loss_before = True

    def __init__(self, q: float = 1.0, dp_safe: bool = False, f_max: float | None = None) -> None:
        super().__init__()
        check_non_negative("q", q)
        if dp_safe and f_max is None:
            raise ConfigError("f_max: q-FFL with dp_safe: true needs the declared loss bound F_max")
        if f_max is not None:
            check_positive("f_max", f_max)
        self.q, self.dp_safe, self.f_max = float(q), bool(dp_safe), f_max
        self.dp_own_weights = self.dp_safe

    @override
    def on_federation_setup(self, federation: Federation) -> None:
        if not self.dp_safe and not federation.optimizer.is_plain_sgd() or federation.optimizer.momentum != 0.0:
            raise ConfigError(f"optimizer: q-FFL needs torch.optim.SGD with momentum 0 (it takes L = 1/lr); got"
                              f" {federation.optimizer.describe()}")

    @override
    def combination(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                    log: RoundLogger) -> Combination:
        if update.loss_before is None:
            raise RuntimeError("q-FFL needs CohortUpdate.loss_before; the engine did not measure it")
        if bool((update.loss_before < 0).any()):  # F_k^q of a negative loss is undefined for most q
            k = int(update.loss_before.argmin())
            raise ConfigError(f"q-FFL needs a non-negative client loss F_k (its weights are F_k^q); client"
                              f" {int(update.client_ids[k])}'s loss before training is"
                              f" {float(update.loss_before[k]):.6g}: make model.client's training objective >= 0")
        if self.dp_safe:
            own = dp_safe_qffl_weights(update.loss_before, self.q, self.f_max).to(global_w)
            p, degenerate = normalize_weights(own)
            if degenerate:
                self.warn_degenerate_once("weights", round_idx)
            return Combination(p, own_weights=own)
        lr = federation.optimizer.lr
        p, scale, new_w = qffl_combination(global_w, update.weights, update.loss_before, lr, self.q)
        return Combination(p, scale, exact=lambda: new_w)

    @override
    def aggregate(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                  log: RoundLogger) -> Tensor:
        new_w = super().aggregate(round_idx, global_w, update, federation, log)
        log.log_scalars({
            "server/update_norm": float(torch.linalg.vector_norm(new_w - global_w)),
            "server/loss_before_mean": float(update.loss_before.double().mean()),
        })
        return new_w
