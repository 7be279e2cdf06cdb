"""Base classes of federated callbacks: round hooks with the round index, and aggregation."""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any

import pytorch_lightning as pl
from pytorch_lightning import Callback
from pytorch_lightning.utilities import rank_zero_warn
from torch import Tensor

from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.engines.hooks import ClientHooks

if TYPE_CHECKING:
    from lightning_fl.evaluation import ClientEvaluation
    from lightning_fl.loop import FederatedLoop


class FederatedCallback(Callback, ClientHooks):
    """A Lightning ``Callback`` with federated round hooks and client-side hooks.

    Round hooks receive the round index ``t`` explicitly (0-based; one Trainer epoch is one round).
    Client-side hooks (see :class:`~lightning_fl.engines.hooks.ClientHooks`) run inside the client
    engine on cohort-stacked tensors. Stateful subclasses implement ``state_dict``/``load_state_dict``
    so a resumed run continues exactly.
    """

    def on_round_start(self, trainer: pl.Trainer, loop: FederatedLoop, round_idx: int, client_ids: Tensor) -> None:
        """Called after the cohort of round ``round_idx`` is sampled, before local training."""

    def on_round_end(self, trainer: pl.Trainer, loop: FederatedLoop, round_idx: int, update: CohortUpdate) -> None:
        """Called after the global model of round ``round_idx`` was updated (metrics, logging)."""

    def on_clients_evaluated(self, trainer: pl.Trainer, loop: FederatedLoop, round_idx: int,
                             evaluation: ClientEvaluation) -> None:
        """Called after the global model was evaluated on every client's test split."""


class AggregationCallback(FederatedCallback):
    """The one callback per run that computes ``w^{t+1}`` from ``w^t`` and the cohort's update.

    Subclasses implement :meth:`aggregate` as a thin wrapper over pure functions in
    ``lightning_fl.functional``; all inputs are fp32 on the global model's device (SPEC section 1).

    Attributes:
        supports_hierarchy: Whether the server step only needs each member's weights and sample count,
            so it can combine institution models in hierarchy mode (SPEC section 6).
    """

    supports_hierarchy: bool = False

    def __init__(self) -> None:
        super().__init__()
        self._warned: set[str] = set()

    @abstractmethod
    def aggregate(self, trainer: pl.Trainer, loop: FederatedLoop, round_idx: int, global_w: Tensor,
                  update: CohortUpdate) -> Tensor:
        """Return the new global vector ``w^{t+1}`` of shape ``(d,)``.

        Args:
            trainer: The Lightning trainer.
            loop: The federated loop (for ``log_round`` and client-optimizer facts such as ``client_lr``).
            round_idx: The round ``t``.
            global_w: ``w^t`` flattened, ``(d,)`` fp32.
            update: The cohort's stacked results; ``update.weights`` is ``(K, d)`` fp32.
        """

    def warn_degenerate_once(self, what: str, round_idx: int) -> None:
        """Warn (once per kind) that a weight normalisation fell back to uniform weights (SPEC 1)."""
        if what not in self._warned:
            self._warned.add(what)
            rank_zero_warn(f"round {round_idx}: {type(self).__name__} {what} summed to 0/NaN/inf;"
                           " using uniform weights over the cohort (warned once)")

    @property
    def state_key(self) -> str:
        return type(self).__name__

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass
