"""FedNova: normalised averaging of local updates (docs/algorithms.md, FedNova)."""

from __future__ import annotations

import torch
from pytorch_lightning.utilities import rank_zero_warn
from torch import Tensor
from typing_extensions import override

from lightning_fl.aggregation.pipeline import Combination
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.faults.validation import ConfigError, check_positive
from lightning_fl.functional.fednova import fednova_normalizer, fednova_step, normalized_updates
from lightning_fl.functional.weights import as_float_like, normalize_weights, weighted_average
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import AggregationCallback
from lightning_fl.simulation.federation import Federation


class FedNova(AggregationCallback):
    """FedNova (Wang et al. 2020) with the momentum-aware normaliser.

    docs/algorithms.md, FedNova, each round::

        p_k = n_k / sum_j n_j
        a_k = tau_k                                               (plain SGD)
        a_k = (tau_k - rho (1 - rho^tau_k) / (1 - rho)) / (1 - rho)  (client momentum rho)
        d_k = (w^t - y_k) / a_k
        tau_eff = sum_k p_k a_k
        w^{t+1} = w^t - tau_eff sum_k p_k d_k

    ``tau_k`` is the number of local optimizer steps the engine reports; ``rho`` is the client
    optimizer's momentum (``model.optimizer.init_args.momentum``, ``federation.optimizer.momentum``). Math:
    :func:`lightning_fl.functional.fednova.fednova_step`.

    Readings (see the functional module):

    - ``a_k`` is the L1 norm of the client's step weights for heavy-ball SGD with a fresh momentum
      buffer each round. It does not model ``nesterov``, ``dampening``, other optimizers or a momentum
      buffer kept between participations (``model.keep_client_optimizer_state``); in those cases the
      run goes on with the formula above and a warning is logged once at the start of training.
    - A client with ``tau_k = 0`` contributes ``d_k = 0`` and still counts in ``p_k``.
    - All ``n_k`` zero: ``p_k`` falls back to uniform and a warning is logged once (docs/algorithms.md, Server arithmetic).
    - Stateless across rounds. ``num_steps`` of an institution in hierarchy mode is not a step count
      of one optimizer, so FedNova does not run in hierarchy mode.

    TensorBoard (step = round number ``t + 1``): ``server/tau_eff``.

    Args:
        dp_safe: The DP-safe variant (docs/algorithms.md, Client-level differential privacy): the constant
            ``tau_eff`` below in place of the cohort's ``sum_k p_k a_k``; under ``model.dp`` the rows
            ``d_k = Δ_k / a_k`` are clipped and summed with the DP weights ``min(n_k / n_cap, 1)``
            (``model.dp.weight_cap``) over the fixed denominator. Without ``model.dp``:
            ``w^t + tau_eff sum_k p_k d_k``.
        tau_eff: The constant ``tau_eff > 0`` of ``dp_safe`` (e.g. the local steps of a typical client).

    Raises:
        ConfigError: At set-up, if the client optimizer's momentum is outside ``[0, 1)``; ``dp_safe``
            without a ``tau_eff > 0``.

    Example (YAML)::

        model:
          optimizer: {class_path: torch.optim.SGD, init_args: {lr: 0.01, momentum: 0.9}}
        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.FedNova
    """

    logged_scalars = ("server/tau_eff",)

    def __init__(self, dp_safe: bool = False, tau_eff: float | None = None) -> None:
        super().__init__()
        if dp_safe and tau_eff is None:
            raise ConfigError("tau_eff: FedNova with dp_safe: true needs the constant tau_eff")
        if tau_eff is not None:
            check_positive("tau_eff", tau_eff)
        self.dp_safe, self.tau_eff = bool(dp_safe), tau_eff

    @override
    def on_federation_setup(self, federation: Federation) -> None:
        momentum = federation.optimizer.momentum
        if not 0.0 <= momentum < 1.0:
            raise ConfigError(f"optimizer.init_args.momentum must be in [0, 1) for FedNova's normaliser;"
                              f" got {momentum!r}")
        optimizer = federation.optimizer.probe()
        sgd_heavy_ball = (type(optimizer) is torch.optim.SGD and not optimizer.defaults.get("nesterov")
                          and not optimizer.defaults.get("dampening"))
        if not sgd_heavy_ball:
            rank_zero_warn(f"FedNova's normaliser a_k assumes SGD (heavy-ball momentum, no nesterov/dampening); the"
                           f" client optimizer is {federation.optimizer.describe()} (warned once)")
        elif momentum > 0 and federation.optimizer.keeps_state:
            rank_zero_warn("FedNova's normaliser a_k assumes a fresh momentum buffer each round; with"
                           " model.keep_client_optimizer_state it is an approximation (warned once)")

    @override
    def combination(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                    log: RoundLogger) -> Combination:
        momentum = federation.optimizer.momentum
        if self.dp_safe:  # a constant tau_eff: the cohort's sum_k p_k a_k would couple the clients
            p, degenerate = normalize_weights(as_float_like(update.num_samples, global_w))
            if degenerate:
                self.warn_degenerate_once("sample-count weights", round_idx)
            a = as_float_like(fednova_normalizer(update.num_steps, momentum), global_w)
            tau_eff = float(self.tau_eff)
            log.log_scalars({"server/tau_eff": tau_eff})
            return Combination(p, tau_eff, rows=lambda rows: normalized_updates(rows, a), exact=lambda: global_w +
                               tau_eff * weighted_average(normalized_updates(update.weights - global_w, a), p))
        step = fednova_step(global_w, update.weights, update.num_samples, update.num_steps, momentum)
        if step.degenerate:
            self.warn_degenerate_once("sample-count weights", round_idx)
        log.log_scalars({"server/tau_eff": float(step.tau_eff)})
        p, _ = normalize_weights(as_float_like(update.num_samples, global_w))
        a = as_float_like(fednova_normalizer(update.num_steps, momentum), global_w)
        return Combination(p, step.tau_eff, rows=lambda rows: normalized_updates(rows, a), exact=lambda: step.new_w)
