"""FedRep: a shared representation and a personal head trained in turn (docs/algorithms.md, Personalization, FedRep)."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor
from typing_extensions import override

from lightning_fl.callbacks.personalized import PersonalizedAggregation
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.faults.validation import check_positive
from lightning_fl.simulation.federation import Federation


class FedRep(PersonalizedAggregation):
    """FedRep (Collins et al. ICML 2021, Alg. 1): ``tau_h`` epochs on the head, then ``tau_b`` on the body.

    From ``(body^t, h_k)`` the client trains the head with the body frozen for ``head_epochs`` epochs
    (batch order: stream ``personal``), then the body with the head frozen for ``body_epochs`` epochs
    (stream ``train``); each phase has a fresh client optimizer, and a frozen part gets no gradient, so
    no step (nor weight decay or momentum) touches it, as with ``requires_grad = False`` in the authors'
    code. The body is sent and ``n_k``-averaged; ``h_k`` stays. Evaluated: ``(body^{t+1}, h_k)``.
    ``model.local_epochs`` is not used. Authors' defaults: ``tau_h = 10``, ``tau_b = 1``, SGD lr 0.01,
    momentum 0.5, weight decay 1e-4, ``B = 10``.

    Args:
        head_epochs: ``tau_h >= 1``.
        body_epochs: ``tau_b >= 1``.
        weighting: ``samples`` (default) or ``uniform``.
        personal_init: ``received`` (default) or ``w0``.
        head_prefixes: Name prefixes of the head; ``None``: the model's own.

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.FedRep
              init_args: {head_epochs: 10, body_epochs: 1}
        model:
          eval: {model: personal}
    """

    personal_part = "head"
    has_global_model = False

    def __init__(self, head_epochs: int = 10, body_epochs: int = 1, weighting: str = "samples",
                 personal_init: str = "received", head_prefixes: list[str] | None = None) -> None:
        super().__init__(weighting=weighting, personal_init=personal_init, head_prefixes=head_prefixes)
        check_positive("head_epochs", head_epochs, integer=True)
        check_positive("body_epochs", body_epochs, integer=True)
        self.head_epochs, self.body_epochs = int(head_epochs), int(body_epochs)

    @override
    def train_round(self, train: Callable[..., CohortUpdate], round_idx: int, client_ids: Tensor,
                    participation: Tensor, federation: Federation) -> CohortUpdate:
        global_w = federation.global_model.weights()
        body = frozenset(n for n in federation.trainable if n not in self.names)
        head = train(client_ids, participation, start_rows=self.start_rows(client_ids, global_w), frozen=body,
                     local_epochs=self.head_epochs, num_steps=None, stream="personal")
        update = train(head.client_ids, head.participation, start_rows=head.weights, frozen=self.names,
                       local_epochs=self.body_epochs, num_steps=None)
        self.keep(update)
        return update
