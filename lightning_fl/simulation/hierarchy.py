"""Three-layer (client / institution / server) training as a mode of the FederatedLoop (docs/algorithms.md, Three-layer hierarchy)."""

from __future__ import annotations

from typing import Any

import copy

import torch
from torch import Tensor

from lightning_fl.aggregation.pipeline import AggregationPipeline, Combination
from lightning_fl.aggregation.server_optimizers import ServerSGD
from lightning_fl.aggregation.stage import StageContext
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.faults.validation import ConfigError, check_choice, check_positive
from lightning_fl.faults.warn_once import WarnOnce
from lightning_fl.functional.weights import fedavg_weights, weighted_average
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.fedadp_state import fedadp_step
from lightning_fl.state.declared_state import DeclaredState

ASSIGNMENTS = ("contiguous", "round_robin", "explicit")
INSTITUTION_AGGREGATIONS = ("fedavg", "fedadp")
#: Gompertz ``a`` of FedAdp at the institutions (FedAdp's default, as the Tempo paper's baseline).
INSTITUTION_FEDADP_ALPHA = 5.0


class InstitutionAggregation(DeclaredState):
    """How an institution combines its clients' models after each local-aggregation round.

    docs/algorithms.md, Three-layer hierarchy. The weights: ``fedavg``, ``|D_n| / sum |D|`` (Tempo eqs.
    3-7); ``fedadp``, FedAdp (docs/algorithms.md, FedAdp) against the institution model ``w^(m)`` the
    clients started from: ``g_n = w^(m) - y_n``, angle to the ``|D_n|``-weighted mean ``g``, smoothed per
    client by its participation count ``m_n`` (institution rounds it has trained, this one included),
    Gompertz ``a = 5``, weights ``psi_n = |D_n| exp(f(th_n)) / sum``. The smoothed angles are declared
    per-client state (checkpointed with the hierarchy). The weights go through the institutions'
    aggregation pipeline (docs/algorithms.md, Aggregation pipeline): each institution runs its own
    copy, with its own state, over ``y_n - w^(m)``; with none configured, the weighted mean.

    Args:
        method: ``fedavg`` or ``fedadp``.
        pipeline: The institutions' pipeline (``None``: the identity, each institution's weighted mean).
    """

    def __init__(self, method: str = "fedavg", pipeline: AggregationPipeline | None = None) -> None:
        check_choice("hierarchy.institution_aggregation", method, INSTITUTION_AGGREGATIONS)
        self.method = method
        self.pipeline = pipeline if pipeline is not None else AggregationPipeline()
        self.pipelines: list[AggregationPipeline] = []
        self.warn_once = WarnOnce()  # (key, message): each kind of warning once per run
        if method == "fedadp":
            self.add_client_state("smoothed_angle", shape=())  # th_n of every client seen

    def setup(self, members: list[Tensor]) -> None:
        """One pipeline per institution (its own state), checked against the institution's size."""
        if len(self.pipelines) != len(members):
            self.pipelines = [copy.deepcopy(self.pipeline) for _ in members]
        for m, (ids, pipeline) in enumerate(zip(members, self.pipelines, strict=True)):
            pipeline.setup(len(ids), f"the clients of institution {m}", "model.hierarchy.institution_pipeline")
            if pipeline.server_optimizer is None:
                pipeline.server_optimizer = ServerSGD()

    def weights(self, institution_w: Tensor, update: CohortUpdate) -> Tensor:
        """``p``: the members' weights (``fedavg`` or ``fedadp``), in ``institution_w``'s dtype."""
        if self.method == "fedavg":
            weights, _ = fedavg_weights(update.num_samples.to(institution_w.device))
            return weights.to(institution_w.dtype)
        out = fedadp_step(self.smoothed_angle, institution_w, update, INSTITUTION_FEDADP_ALPHA)
        if out.degenerate:
            self.warn_once("degenerate", "hierarchy.institution_aggregation fedadp: weights summed to 0/NaN/inf; using"
                                         " uniform weights over the institution's clients (warned once)")
        return out.weights

    def combine(self, institution_w: Tensor, update: CohortUpdate, institution: int = 0, round_idx: int = 0,
                seed: int = 0, log: RoundLogger | None = None) -> Tensor:
        """The institution's new model from its clients' ``update`` (they started from ``institution_w``)."""
        p = self.weights(institution_w, update)
        exact = (lambda: weighted_average(update.weights, p)) if self.method == "fedadp" else None
        if not self.pipelines:  # used without set-up (a bare combine): the weighted mean
            return exact() if exact is not None else update.weighted_sum(p)
        pipeline = self.pipelines[institution]
        log = log if log is not None else RoundLogger([], round_idx + 1)
        ctx = StageContext(round_idx, update.client_ids, institution_w, seed, pipeline.f, log, self.warn_once)
        w_agg = pipeline.combine(institution_w, update, Combination(p, exact=exact), ctx, "the institution")
        return pipeline.server_optimizer.step(institution_w, w_agg, log)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        pipelines = [{**p.state_dict(), "server_optimizer": p.server_optimizer.state_dict()} for p in self.pipelines]
        if any(stage["server"] or stage["clients"] for p in pipelines for stage in p.values()):
            state["pipelines"] = pipelines
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        for pipeline, saved in zip(self.pipelines, state_dict.get("pipelines", ()), strict=False):
            pipeline.load_state_dict(saved)
            pipeline.server_optimizer.load_state_dict(saved["server_optimizer"])


class Hierarchy:
    """Institutions that each own a fixed set of clients, and their local-aggregation schedule.

    One global iteration (one Trainer epoch): every institution starts from the server model
    ``w^(c)``; for ``local_rounds`` (``tau_i``) rounds each of its clients trains ``epochs[m]`` local
    epochs from the institution model and the institution averages them weighted by ``|D_n|``; then
    the run's aggregation callback combines the institution models (FedAvg: weighted by
    ``|D^(m)|``, Tempo eqs. 3-7; FedAdp is the Tempo paper's alternative). With
    ``institution_aggregation: fedadp`` the institutions combine their clients with FedAdp instead of
    ``|D_n|``-weighted averaging (:class:`InstitutionAggregation`); with the ``FedAdp`` aggregation
    callback on the server that is the Tempo paper's three-layer FedAdp baseline (its section 4).

    Args:
        num_institutions: ``M``.
        assignment: ``contiguous`` (blocks of consecutive client ids), ``round_robin`` (client ``k``
            goes to institution ``k mod M``) or ``explicit`` (``institutions`` lists the clients).
        local_rounds: ``tau_i``, institution aggregations per global iteration.
        institutions: With ``assignment: explicit``, one list of client ids per institution.
        institution_aggregation: How institutions weigh their clients: ``fedavg`` (default,
            ``|D_n|``-weighted) or ``fedadp`` (FedAdp, per-client smoothed angles, ``a = 5``).
        institution_pipeline: The institutions' aggregation pipeline (transforms, a robust rule, a server
            optimizer; :class:`~lightning_fl.aggregation.AggregationPipeline`), one copy with its own state
            per institution; the server level takes ``model.aggregation``. ``None``: the weighted mean.

    Raises:
        ConfigError: On ``tau_i < 1``, an unknown assignment or institution aggregation, an institution
            with no clients, a client assigned twice or a client id out of range (checked against the
            data at setup).

    Example (YAML)::

        model:
          hierarchy:
            num_institutions: 5
            assignment: contiguous
            local_rounds: 4
            institution_aggregation: fedavg
    """

    def __init__(self, num_institutions: int = 5, assignment: str = "contiguous", local_rounds: int = 4,
                 institutions: list[list[int]] | None = None, institution_aggregation: str = "fedavg",
                 institution_pipeline: AggregationPipeline | None = None) -> None:
        check_choice("hierarchy.assignment", assignment, ASSIGNMENTS)
        check_positive("hierarchy.local_rounds", local_rounds, integer=True)
        self.aggregation = InstitutionAggregation(institution_aggregation, institution_pipeline)
        self.institution_pipeline = institution_pipeline
        if assignment == "explicit":
            if not institutions:
                raise ConfigError("hierarchy.institutions must list the client ids of every institution when"
                                  " hierarchy.assignment is explicit")
            num_institutions = len(institutions)
        check_positive("hierarchy.num_institutions", num_institutions, integer=True)
        self.num_institutions = num_institutions
        self.assignment = assignment
        self.local_rounds = local_rounds
        self.institutions_config = institutions
        self.members: list[Tensor] = []
        self.epochs = torch.zeros(num_institutions, dtype=torch.long)
        self.participation = torch.zeros(num_institutions, dtype=torch.long)

    def setup(self, num_clients: int, local_epochs: int) -> None:
        """Assign clients to institutions and start every institution at ``local_epochs``."""
        self.members = assign_clients(num_clients, self.num_institutions, self.assignment, self.institutions_config)
        self.aggregation.setup(self.members)
        if not bool((self.epochs > 0).all()):
            self.epochs = torch.full((self.num_institutions,), local_epochs, dtype=torch.long)

    def set_epochs(self, epochs: Tensor) -> None:
        """Local epochs per institution for the next global iteration (Tempo)."""
        if epochs.shape != (self.num_institutions,) or bool((epochs < 1).any()):
            raise ValueError(f"epochs must be {self.num_institutions} integers >= 1; got {epochs.tolist()}")
        self.epochs = epochs.to(torch.long).cpu().clone()

    def state_dict(self) -> dict[str, Any]:
        return {"epochs": self.epochs.clone(), "participation": self.participation.clone(),
                "members": [m.clone() for m in self.members], "institution_aggregation": self.aggregation.method,
                "institution_state": self.aggregation.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        members = [m.clone() for m in state["members"]]
        if len(members) != len(self.members) or any(not torch.equal(a, b) for a, b in zip(members, self.members)):
            raise ConfigError("hierarchy assignment differs from the checkpoint's; resume with the same hierarchy")
        method = state.get("institution_aggregation", "fedavg")  # checkpoints from before the option: fedavg
        if method != self.aggregation.method:
            raise ConfigError(f"hierarchy.institution_aggregation differs from the checkpoint's ({method}); resume with"
                              " the same hierarchy")
        self.epochs = state["epochs"].clone()
        self.participation = state["participation"].clone()
        if "institution_state" in state:
            self.aggregation.load_state_dict(state["institution_state"])


def assign_clients(num_clients: int, num_institutions: int, assignment: str,
                   institutions: list[list[int]] | None = None) -> list[Tensor]:
    """Client ids of each institution (sorted ``long`` tensors).

    Raises:
        ConfigError: If an institution gets no client, a client is assigned twice or an id is out of range.
    """
    if assignment == "explicit":
        members = [torch.tensor(sorted(ids), dtype=torch.long) for ids in institutions or []]
        flat = torch.cat(members) if members else torch.zeros(0, dtype=torch.long)
        if len(flat) and (int(flat.min()) < 0 or int(flat.max()) >= num_clients):
            raise ConfigError(f"hierarchy.institutions client ids must be between 0 and {num_clients - 1}")
        counts = torch.bincount(flat, minlength=num_clients)
        if bool((counts > 1).any()):
            raise ConfigError(f"hierarchy.institutions assigns client {int((counts > 1).nonzero()[0])} more than once")
    elif num_institutions > num_clients:
        raise ConfigError(f"hierarchy.num_institutions must be between 1 and {num_clients} (the number of clients);"
                          f" got {num_institutions}")
    elif assignment == "contiguous":
        members = [block.clone() for block in torch.arange(num_clients).tensor_split(num_institutions)]
    else:
        members = [torch.arange(m, num_clients, num_institutions) for m in range(num_institutions)]
    for m, ids in enumerate(members):
        if len(ids) == 0:
            raise ConfigError(f"hierarchy institution {m} has no clients; every institution needs at least one")
    return members
