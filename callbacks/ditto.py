"""Ditto: FedAvg plus a personal model pulled towards the global one (docs/algorithms.md, Personalization, Ditto)."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor
from typing_extensions import override

from lightning_fl.callbacks.personalized import PersonalizedAggregation
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.engines.hooks import ClientHookSet
from lightning_fl.faults.validation import check_non_negative
from lightning_fl.personalization.pull_towards_global import PullTowardsGlobal
from lightning_fl.simulation.federation import Federation


class Ditto(PersonalizedAggregation):
    """Ditto (Li et al. ICML 2021, Alg. 1): the global model trains as FedAvg; each client also keeps ``v_k``.

    Personal step on minibatch ``b``: ``v_k <- v_k - eta (grad F_k(v_k; b) + lambda (v_k - w^t))``, with
    ``w^t`` fixed. As in the authors' code there are ``s = tau_k`` personal steps on the global steps'
    minibatches; ``v_k`` depends only on ``v_k``, ``w^t`` and the batches, so the engine runs them as a
    second pass over the same batches (the same numbers as interleaving them, personal step first).
    Evaluated: ``v_k``. ``v_k`` starts as the first global model client ``k`` receives
    (``personal_init: w0``: ``w^0``, the authors' choice).

    Args:
        lam: ``lambda >= 0`` (default 1, the authors' FMNIST script); 0 trains ``v_k`` as Local from ``w^t``.
        weighting: Server weights: ``samples`` (default) or ``uniform`` (the authors' server).
        personal_init: ``received`` (default) or ``w0``.

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.Ditto
              init_args: {lam: 1.0}
        model:
          eval: {model: personal}
    """

    personal_part = "full"
    personal_in_global = False

    def __init__(self, lam: float = 1.0, weighting: str = "samples", personal_init: str = "received") -> None:
        super().__init__(weighting=weighting, personal_init=personal_init)
        check_non_negative("lam", lam)
        self.lam = float(lam)
        self._personal_hooks = ClientHookSet([PullTowardsGlobal(self.lam)])

    @override
    def train_round(self, train: Callable[..., CohortUpdate], round_idx: int, client_ids: Tensor,
                    participation: Tensor, federation: Federation) -> CohortUpdate:
        global_w = federation.global_model.weights()
        update = train(client_ids, participation)
        # The survivors' personal steps, on the same batches (stream "train") and as many of them.
        personal = train(update.client_ids, update.participation, hooks=self._personal_hooks,
                         start_rows=self.start_rows(update.client_ids, global_w), num_steps=update.num_steps)
        self.keep(personal)
        return update
