"""FedNova: normalised averaging of local updates (docs/algorithms.md, FedNova)."""

from __future__ import annotations

import torch
from pytorch_lightning.utilities import rank_zero_warn
from torch import Tensor
from typing_extensions import override

from lightning_fl.aggregation.pipeline import Combination
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.faults.validation import ConfigError
from lightning_fl.functional.fednova import fednova_normalizer, fednova_step, normalized_updates
from lightning_fl.functional.weights import as_float_like, normalize_weights
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

    Raises:
        ConfigError: At set-up, if the client optimizer's momentum is outside ``[0, 1)``.

    Example (YAML)::

        model:
          optimizer: {class_path: torch.optim.SGD, init_args: {lr: 0.01, momentum: 0.9}}
        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.FedNova
    """

    logged_scalars = ("server/tau_eff",)

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
        step = fednova_step(global_w, update.weights, update.num_samples, update.num_steps, momentum)
        if step.degenerate:
            self.warn_degenerate_once("sample-count weights", round_idx)
        log.log_scalars({"server/tau_eff": float(step.tau_eff)})
        p, _ = normalize_weights(as_float_like(update.num_samples, global_w))
        a = as_float_like(fednova_normalizer(update.num_steps, momentum), global_w)
        return Combination(p, step.tau_eff, rows=lambda rows: normalized_updates(rows, a), exact=lambda: step.new_w)
