"""The base of personalization methods: a personal part per client beside (or inside) the shared model.

docs/algorithms.md, Personalization. A method keeps client ``k``'s personal part ``p_k`` as declared
per-client state (memory or disk, checkpointed, untouched for dropped clients); the engines start
each client from its start row and the server averages only what is shared.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from typing_extensions import override

from lightning_fl.aggregation.pipeline import Combination
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.faults.validation import ConfigError, check_choice
from lightning_fl.functional.weights import WEIGHTINGS, fedavg_weights
from lightning_fl.personalization.personal_part import part_mask, part_names
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import AggregationCallback
from lightning_fl.simulation.federation import Federation

#: Where a client's personal part starts: the global model it first receives, or ``w^0``.
PERSONAL_INITS = ("received", "w0")


class PersonalizedAggregation(AggregationCallback):
    """FedAvg over the shared entries, with a personal part ``p_k`` kept per client.

    Subclasses set the class attributes and, where local training is more than one pass from the
    start rows, override :meth:`train_round`.

    Attributes:
        personal_part: ``full``, ``head`` (the model's ``head_prefixes``) or ``bn`` (BatchNorm entries).
        personal_in_global: Whether ``p_k`` is part of the model each client trains and sends (FedPer,
            FedRep, FedBN, Local: its entries are never aggregated and stay at ``w^0`` in ``w^t``); ``False``:
            a separate model beside the global one (Ditto).
        shares: Whether the server aggregates anything (Local: no).
        has_global_model: Whether ``w^t`` alone is a model worth evaluating (``model.eval.model: global``).

    Args:
        weighting: Server weights: ``samples`` (``n_k``) or ``uniform`` (``1/K``).
        personal_init: ``received`` (``p_k <- P(w^t)`` at client ``k``'s first participation) or ``w0``
            (``P(w^0)``, as the Ditto, FedRep and PFLlib code do).
        head_prefixes: Name prefixes of the head (``personal_part: head``); ``None``: the model's own
            ``head_prefixes`` (its last linear layer).
    """

    personal_part = "full"
    personal_in_global = True
    shares = True
    has_global_model = True
    personal_model = True
    supports_reduce = False

    def __init__(self, weighting: str = "samples", personal_init: str = "received",
                 head_prefixes: list[str] | None = None) -> None:
        super().__init__()
        check_choice("weighting", weighting, WEIGHTINGS)
        check_choice("personal_init", personal_init, PERSONAL_INITS)
        self.weighting, self.personal_init = weighting, personal_init
        self.head_prefixes = None if head_prefixes is None else tuple(head_prefixes)
        self.add_client_state("personal", shape="model", default=0.0)  # p_k (only the part's entries are read)
        self.add_server_state("initial_w")  # w^0, for personal_init: w0
        self.names: frozenset[str] = frozenset()

    @override
    def on_federation_setup(self, federation: Federation) -> None:
        if federation.optimizer.keeps_state:
            raise ConfigError(f"model.keep_client_optimizer_state: {type(self).__name__} trains personal passes with"
                              " fresh optimizers; set it to false")
        field = f"{type(self).__name__}.head_prefixes" if self.head_prefixes else "model.client head_prefixes"
        self.names = part_names(federation.layout, self.personal_part,
                                self.head_prefixes or federation.head_prefixes, federation.batchnorm_entries,
                                getattr(self, "bn_match", "module"), field)
        self.layout = federation.layout

    def require_plain_sgd(self, federation: Federation, what: str) -> None:
        """One-line error unless the client optimizer is plain SGD (no momentum, no weight decay).

        For methods whose own steps (APFL's ``v_k``, pFedMe's ``theta``) are plain SGD at the client lr.
        """
        decay = federation.optimizer.probe().defaults.get("weight_decay", 0.0)
        if not federation.optimizer.is_plain_sgd() or decay:
            raise ConfigError(f"model.optimizer: {type(self).__name__} {what} (no momentum, no weight_decay); got"
                              f" {federation.optimizer.describe()}{f' with weight_decay {decay}' if decay else ''}")

    def mask(self, device: torch.device) -> Tensor:
        """``(d,)`` bool: the personal part's flat entries."""
        return part_mask(self.layout, self.names, device)

    # ------------------------------------------------------------------ personal state
    def has_personal(self, client_ids: Tensor) -> list[bool]:
        """Whether each client has a personal part yet (a completed participation)."""
        return self.personal.seen(client_ids)

    def start_rows(self, client_ids: Tensor, global_w: Tensor) -> Tensor:
        """``(K, d)``: ``w^t`` with each client's personal part in place (a newcomer's from the init rule)."""
        if self.initial_w is None:
            self.initial_w = global_w.detach().clone()
        personal = self.personal.gather(client_ids, global_w.device)
        first = ~torch.tensor(self.has_personal(client_ids), dtype=torch.bool, device=global_w.device)
        init = self.initial_w.to(global_w.device) if self.personal_init == "w0" else global_w
        personal[first] = init.unsqueeze(0).expand(int(first.sum()), -1)
        return self._with_shared(personal, global_w)

    def _with_shared(self, personal: Tensor, global_w: Tensor) -> Tensor:
        """``personal`` (``(K, d)``, overwritten) with the shared entries of ``global_w``: no second ``(K, d)``."""
        shared = ~self.mask(global_w.device)
        if bool(shared.any()):
            personal[:, shared] = global_w[shared]
        return personal

    def evaluated_rows(self, client_ids: Tensor, global_w: Tensor) -> Tensor:
        """``(K, d)``: each client's evaluated personal model with ``w^{t+1} = global_w`` (docs/algorithms.md).

        Raises:
            ConfigError: For a client without a personal part (``model.eval.on_missing_personal: error``).
        """
        missing = [int(k) for k, seen in zip(client_ids.tolist(), self.has_personal(client_ids)) if not seen]
        if missing:
            raise ConfigError(f"model.eval: clients {missing[:10]} have no personal model yet ({type(self).__name__});"
                              " evaluate clients: participated, or set on_missing_personal: finetune")
        return self._with_shared(self.personal.gather(client_ids, global_w.device), global_w)

    def keep(self, update: CohortUpdate) -> None:
        """Store the personal part of each surviving client's trained row."""
        self.personal.scatter(update.client_ids, update.weights)

    # ------------------------------------------------------------------ training and aggregation
    @override
    def train_round(self, train: Callable[..., CohortUpdate], round_idx: int, client_ids: Tensor,
                    participation: Tensor, federation: Federation) -> CohortUpdate:
        global_w = federation.global_model.weights()
        update = train(client_ids, participation, start_rows=self.start_rows(client_ids, global_w))
        self.keep(update)
        return update

    @override
    def combination(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                    log: RoundLogger) -> Combination:
        weights, degenerate = fedavg_weights(update.num_samples.to(global_w.device), self.weighting)
        if degenerate:
            self.warn_degenerate_once("sample-count weights", round_idx)
        return Combination(weights.to(global_w.dtype))

    @override
    def aggregate(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                  log: RoundLogger) -> Tensor:
        if not self.shares:
            return global_w.clone()
        if not self.personal_in_global:
            return super().aggregate(round_idx, global_w, update, federation, log)
        mask = self.mask(global_w.device)
        # Only the shared part is sent: the personal entries of every row read as w^t's (so robust
        # rules, clipping and noise see the shared part alone), and stay exactly w^t's afterwards.
        update.weights[:, mask] = global_w[mask]
        new_w = super().aggregate(round_idx, global_w, update, federation, log)
        new_w[mask] = global_w[mask]
        return new_w
