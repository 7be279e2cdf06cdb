"""Base classes of federated callbacks: round hooks with the round index, and aggregation.

Every hook receives what it needs as arguments: the round index ``t`` (0-based; one Trainer epoch
is one round), the read-only :class:`~lightning_fl.simulation.federation.Federation`, the round's data and a
:class:`~lightning_fl.reporting.round_logger.RoundLogger` whose step is already the right round number. A
callback never reads or writes the loop; what it decides for later rounds it returns as a
:class:`~lightning_fl.simulation.round_result.RoundPlan`, and what it remembers it declares
(:class:`~lightning_fl.state.declared_state.DeclaredState`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from pytorch_lightning import Callback
from torch import Tensor

from lightning_fl.aggregation.pipeline import AggregationPipeline, Combination
from lightning_fl.aggregation.server_optimizers import ServerOptimizer, ServerSGD
from lightning_fl.aggregation.stage import StageContext
from lightning_fl.faults.warn_once import WarnOnce
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.engines.evaluation import ClientEvaluation
from lightning_fl.engines.hooks import ClientHooks
from lightning_fl.faults.validation import ConfigError
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.federation import Federation
from lightning_fl.simulation.round_result import RoundPlan, RoundResult
from lightning_fl.state.declared_state import DeclaredState
from lightning_fl.state.init_args import RecordsInitArgs


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

    An algorithm says how to weigh the cohort (:meth:`combination`: ``(u, p, s)`` of docs/algorithms.md,
    Aggregation pipeline); the run's :class:`~lightning_fl.aggregation.AggregationPipeline`
    (``model.aggregation``) combines the rows; :attr:`server_optimizer` makes ``w^{t+1}``. Subclasses
    are thin wrappers over pure functions in ``lightning_fl.functional``; all inputs are fp32 on the
    global model's device (docs/algorithms.md, Server arithmetic). An algorithm whose server step is
    more than a server optimizer on ``w_agg`` (SCAFFOLD's control variates, FedFa's periods) overrides
    :meth:`aggregate` and calls :meth:`combine`.

    Attributes:
        supports_hierarchy: Whether the server step only needs each member's weights and sample count,
            so it can combine institution models in hierarchy mode (docs/algorithms.md, Three-layer hierarchy).
        supports_reduce: Whether the server step reads the clients' weights only through
            ``update.weighted_sum``, so several processes may exchange partial sums instead of every
            client's weights (``model.exchange: reduce``).
        composable: Whether the algorithm's step is ``(u, p, s)`` and so takes ``model.aggregation`` stages.
        own_server_optimizer: Whether the algorithm brings its own server step (FedFa's momentum, SCAFFOLD's
            ``eta_g``), so ``model.aggregation.server_optimizer`` cannot replace it.
        vectors_down: Model-sized vectors each cohort member receives per round (1: the model;
            SCAFFOLD 2: the model and ``c``), for communication accounting (docs/algorithms.md,
            Communication accounting).
        vectors_up: Model-sized vectors each cohort member sends per round (1: its weights; SCAFFOLD 2:
            ``y_k`` and ``c_k+ - c_k``).
        personal_model: Whether the method keeps a personal model per client (``model.eval.model: personal``).
        has_global_model: Whether ``w^t`` alone is a model to evaluate (not for FedRep, FedPer, FedBN, Local).
        dp_own_weights: Whether :meth:`combination` supplies DP-safe weights ``Combination.own_weights``
            (``dp_safe: true`` of FedFa, q-FFL, DWFed), which ``model.dp`` sums over ``qN``.
    """

    supports_hierarchy: bool = False
    supports_reduce: bool = False
    composable: bool = True
    own_server_optimizer: bool = False
    vectors_down: int = 1
    vectors_up: int = 1
    dp_own_weights: bool = False
    personal_model: bool = False
    has_global_model: bool = True

    def __init__(self) -> None:
        super().__init__()
        self._warn = WarnOnce()
        self.server_optimizer: ServerOptimizer = ServerSGD()
        self.pipeline = AggregationPipeline()

    def use_pipeline(self, pipeline: AggregationPipeline) -> None:
        """Combine with ``pipeline`` (``model.aggregation``); one-line errors for what cannot compose."""
        name = type(self).__name__
        if not (pipeline.is_identity and pipeline.server_optimizer is None) and not self.composable:
            raise ConfigError(f"model.aggregation: {name}'s server step is not a weighted mean of client updates, so"
                              " it takes no transforms, rule or server optimizer; remove model.aggregation")
        if pipeline.server_optimizer is not None:
            if self.own_server_optimizer or not self.server_optimizer.is_plain:
                raise ConfigError(f"model.aggregation.server_optimizer: {name} has its own server step; use it with"
                                  " FedAvg, FedProx, DWFed, FedAdp, IGFL, q-FFL or FedNova weights (FedFa and FedFaMo:"
                                  " with server_momentum 0), or remove it")
            self.server_optimizer = pipeline.server_optimizer
        self.pipeline = pipeline

    def train_round(self, train: Callable[..., CohortUpdate], round_idx: int, client_ids: Tensor,
                    participation: Tensor, federation: Federation) -> CohortUpdate:
        """The cohort's local training of round ``round_idx``; the update :meth:`aggregate` receives.

        ``train(client_ids, participation, **pass_options)`` runs one pass of local training over the
        run's engine and processes; personalization methods call it more than once (a personal pass,
        FedRep's head and body phases) with ``hooks``, ``start_rows``, ``frozen``, ``local_epochs``,
        ``stream`` and ``batch_repeats`` (:meth:`~lightning_fl.engines.base.ClientEngine.train_cohort`).
        Default: one pass of the run's client hooks from ``w^t``.
        """
        return train(client_ids, participation)

    def combination(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                    log: RoundLogger) -> Combination:
        """The cohort's ``(u, p, s)`` for round ``round_idx`` (subclasses that use the default :meth:`aggregate`)."""
        raise NotImplementedError(f"{type(self).__name__} implements aggregate itself")

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
        combination = self.combination(round_idx, global_w, update, federation, log)
        w_agg = self.combine(round_idx, global_w, update, combination, federation, log)
        return self.server_optimizer.step(global_w, w_agg, log)

    def aggregate_empty(self, round_idx: int, global_w: Tensor, federation: Federation, log: RoundLogger) -> Tensor:
        """``w^{t+1}`` of a round with no member under ``model.dp``: the server step on ``w^t`` plus the DP noise."""
        ctx = StageContext(round_idx, torch.zeros(0, dtype=torch.long), global_w, federation.seed, self.pipeline.f, log,
                           self.warn_once)
        return self.server_optimizer.step(global_w, self.pipeline.combine_empty(global_w, ctx), log)

    def combine(self, round_idx: int, global_w: Tensor, update: CohortUpdate, combination: Combination,
                federation: Federation, log: RoundLogger) -> Tensor:
        """``w_agg = w^t + s R(U', p')`` through the run's pipeline (the algorithm's own sum when it is the identity)."""
        # (Some direct callers pass no federation: only keyed stages read the seed.)
        ctx = StageContext(round_idx, update.client_ids, global_w, getattr(federation, "seed", 0), self.pipeline.f, log,
                           self.warn_once)
        return self.pipeline.combine(global_w, update, combination, ctx, type(self).__name__)

    def state_dict(self) -> dict[str, Any]:
        # The server optimizer's moments sit beside the callback's own state, under the names the
        # callbacks used before the pipeline existed, so older checkpoints still resume.
        state = super().state_dict()
        state["server"].update(self.server_optimizer.state_dict()["server"])
        pipeline = self.pipeline.state_dict()
        if any(stage["server"] or stage["clients"] for stage in pipeline.values()):
            state["pipeline"] = pipeline
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.server_optimizer.load_state_dict({"server": state_dict["server"], "clients": {}})
        self.pipeline.load_state_dict(state_dict.get("pipeline", {}))

    def warn_degenerate_once(self, what: str, round_idx: int) -> None:
        """Warn (once per kind) that a weight normalisation fell back to uniform weights (docs/algorithms.md, Server arithmetic)."""
        self._warn(what, f"round {round_idx + 1}: {type(self).__name__} {what} summed to 0/NaN/inf; using uniform"
                         " weights over the cohort (warned once)")

    def warn_once(self, what: str, message: str) -> None:
        """``rank_zero_warn(message)`` the first time ``what`` happens."""
        self._warn(what, message)

    @property
    def state_key(self) -> str:
        return type(self).__name__
