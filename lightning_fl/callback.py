"""Base classes of federated callbacks: round hooks with the round index, and aggregation.

Every hook receives what it needs as arguments: the round index ``t`` (0-based; one Trainer epoch
is one round), the read-only :class:`~lightning_fl.federation.Federation`, the round's data and a
:class:`~lightning_fl.round_logger.RoundLogger` whose step is already the right round number. A
callback never reads or writes the loop; what it decides for later rounds it returns as a
:class:`~lightning_fl.round_result.RoundPlan`, and what it remembers it declares
(:class:`~lightning_fl.declared_state.DeclaredState`).
"""

from __future__ import annotations

from abc import abstractmethod

from pytorch_lightning import Callback
from pytorch_lightning.utilities import rank_zero_warn
from torch import Tensor

from lightning_fl.declared_state import DeclaredState
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.engines.hooks import ClientHooks
from lightning_fl.evaluation import ClientEvaluation
from lightning_fl.federation import Federation
from lightning_fl.init_args import RecordsInitArgs
from lightning_fl.round_logger import RoundLogger
from lightning_fl.round_result import RoundPlan, RoundResult


class FederatedCallback(RecordsInitArgs, DeclaredState, ClientHooks, Callback):
    """A Lightning ``Callback`` with federated round hooks, client-side hooks and declared state.

    Round hooks (below) run on the server between local training and evaluation. Client-side hooks
    (see :class:`~lightning_fl.engines.hooks.ClientHooks`) run inside the client engine on
    cohort-stacked tensors. State declared with ``add_server_state``/``add_client_state`` is saved
    in checkpoints and restored on resume without any code in the subclass.

    ``logged_scalars`` lists the scalar names (``fnmatch`` patterns) a callback logs, so that a
    monitor naming none of the run's metrics is an error before round 1 (``None``: not declared; a
    run with such a callback from outside this package leaves monitors unchecked).

    ``evaluate_last_rounds`` asks the loop to evaluate every round of the last
    ``ceil(0.1 * max_epochs)`` (IGFL's last-10% metric), whatever ``check_val_every_n_epoch`` is.
    """

    logged_scalars: tuple[str, ...] | None = None
    evaluate_last_rounds: bool = False

    def on_federation_setup(self, federation: Federation) -> None:
        """Called once before training or evaluation starts (check the run, e.g. the optimizer)."""

    def on_round_start(self, round_idx: int, client_ids: Tensor, federation: Federation,
                       log: RoundLogger) -> RoundPlan | None:
        """Called after the cohort of round ``round_idx`` is sampled, before local training."""
        return None

    def on_round_end(self, round_idx: int, result: RoundResult, federation: Federation,
                     log: RoundLogger) -> RoundPlan | None:
        """Called after ``w^{t+1}`` was computed; ``log`` logs at step ``t + 1``."""
        return None

    def on_clients_evaluated(self, round_idx: int, evaluation: ClientEvaluation, federation: Federation,
                             log: RoundLogger) -> None:
        """Called after the global model was evaluated on every client; ``log`` logs at the evaluated round."""


class AggregationCallback(FederatedCallback):
    """The one callback per run that computes ``w^{t+1}`` from ``w^t`` and the cohort's update.

    Subclasses implement :meth:`aggregate` as a thin wrapper over pure functions in
    ``lightning_fl.functional``; all inputs are fp32 on the global model's device (docs/algorithms.md, Server arithmetic).

    Attributes:
        supports_hierarchy: Whether the server step only needs each member's weights and sample count,
            so it can combine institution models in hierarchy mode (docs/algorithms.md, Three-layer hierarchy).
        supports_reduce: Whether the server step reads the clients' weights only through
            ``update.weighted_sum``, so several processes may exchange partial sums instead of every
            client's weights (``model.exchange: reduce``).
        vectors_down: Model-sized vectors each cohort member receives per round (1: the model;
            SCAFFOLD 2: the model and ``c``), for communication accounting (docs/algorithms.md,
            Communication accounting).
        vectors_up: Model-sized vectors each cohort member sends per round (1: its weights; SCAFFOLD 2:
            ``y_k`` and ``c_k+ - c_k``).
    """

    supports_hierarchy: bool = False
    supports_reduce: bool = False
    vectors_down: int = 1
    vectors_up: int = 1

    def __init__(self) -> None:
        super().__init__()
        self._warned: set[str] = set()

    @abstractmethod
    def aggregate(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                  log: RoundLogger) -> Tensor:
        """Return the new global vector ``w^{t+1}`` of shape ``(d,)``.

        Args:
            round_idx: The round ``t``.
            global_w: ``w^t`` flattened, ``(d,)`` fp32.
            update: The cohort's stacked results; ``update.weights`` is ``(K, d)`` fp32.
            federation: The run's description (layout, client optimizer, ...).
            log: Logs at step ``t + 1`` (the values describe ``w^{t+1}``).
        """

    def warn_degenerate_once(self, what: str, round_idx: int) -> None:
        """Warn (once per kind) that a weight normalisation fell back to uniform weights (docs/algorithms.md, Server arithmetic)."""
        if what not in self._warned:
            self._warned.add(what)
            rank_zero_warn(f"round {round_idx + 1}: {type(self).__name__} {what} summed to 0/NaN/inf;"
                           " using uniform weights over the cohort (warned once)")

    def warn_once(self, what: str, message: str) -> None:
        """``rank_zero_warn(message)`` the first time ``what`` happens."""
        if what not in self._warned:
            self._warned.add(what)
            rank_zero_warn(message)

    @property
    def state_key(self) -> str:
        return type(self).__name__
