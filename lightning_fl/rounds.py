"""Local training of one round: the flat two-layer loop and the three-layer hierarchy (SPEC 1 and 6).

Both return the :class:`CohortUpdate` that the run's aggregation callback turns into ``w^{t+1}``
(in the hierarchy its members are the institutions) and a :class:`RoundTraffic` record of what a
real deployment would have sent and computed, for communication accounting.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.functional.weights import fedavg_weights, weighted_average
from lightning_fl.validation import DivergenceError

if TYPE_CHECKING:
    from lightning_fl.loop import FederatedLoop


@dataclass
class RoundTraffic:
    """Model transfers and compute of one round, per link level.

    Attributes:
        model_bytes: Size of one model transfer (floating-point state in fp32).
        transfers: Link level (``client`` or ``institution``) to the number of models sent each way.
        compute_seconds: Per institution (one entry in the flat loop), per local round: the estimated
            critical-path compute time, i.e. the slowest client's share of the measured training time.
    """

    model_bytes: int
    transfers: dict[str, int] = field(default_factory=dict)
    compute_seconds: list[list[float]] = field(default_factory=list)


def _train(loop: FederatedLoop, round_idx: int, client_ids: Tensor, participation: Tensor, *, sub_round: int = 0,
           local_epochs: int | None = None, where: str = "") -> tuple[CohortUpdate, float]:
    started = time.perf_counter()
    update = loop.engine.train_cohort(round_idx, client_ids, participation, loop.hooks, sub_round=sub_round,
                                      local_epochs=local_epochs)
    elapsed = time.perf_counter() - started
    bad = update.first_non_finite_client()
    if bad is not None:
        client_id, what = bad
        raise DivergenceError(
            f"round {round_idx}: client {client_id}{where} diverged ({what}); stopping before aggregation, so the"
            " global model and saved checkpoints are untouched (lower the client lr?)")
    # Clients train in parallel in a deployment: the round waits for the one with the most steps.
    steps = update.num_steps.double()
    return update, elapsed * float(steps.max() / steps.sum().clamp_min(1))


def run_flat_round(loop: FederatedLoop, round_idx: int) -> tuple[CohortUpdate, RoundTraffic]:
    """Sample a cohort and train it from the global model (SPEC section 1)."""
    client_ids = loop.sampler.sample(round_idx)
    participation = loop.store.record_participation(client_ids, round_idx)
    for callback in loop.federated_callbacks:
        callback.on_round_start(loop.trainer, loop, round_idx, client_ids)
    update, compute = _train(loop, round_idx, client_ids, participation)
    traffic = RoundTraffic(loop.layout.numel * 4, {"client": len(client_ids)}, [[compute]])
    return update, traffic


def run_hierarchical_round(loop: FederatedLoop, round_idx: int) -> tuple[CohortUpdate, RoundTraffic]:
    """One global iteration of the hierarchy (SPEC section 6, eqs. 3-7).

    Every institution starts from ``w^(c)``; for ``tau_i`` rounds all its clients train
    ``epochs[m]`` epochs from the institution model, which becomes their ``|D_n|``-weighted average.
    The global model is restored to ``w^(c)`` afterwards, so the aggregation callback sees the
    institutions as its cohort: ``weights`` are the institution models, ``num_samples`` their
    ``|D^(m)|``.
    """
    hierarchy, layout = loop.hierarchy, loop.layout
    state = loop.model.state_dict()
    server_w = layout.flatten(state).clone()
    all_clients = torch.cat(hierarchy.members).sort().values
    for callback in loop.federated_callbacks:
        callback.on_round_start(loop.trainer, loop, round_idx, all_clients)
    num_institutions = hierarchy.num_institutions
    institution_w = torch.empty(num_institutions, layout.numel, device=server_w.device)
    sizes = torch.zeros(num_institutions, dtype=torch.long)
    steps = torch.zeros(num_institutions, dtype=torch.long)
    acc = torch.zeros(num_institutions, dtype=torch.float64)
    loss = torch.zeros(num_institutions, dtype=torch.float64)
    hists = []
    compute: list[list[float]] = []
    int_state: dict[str, Tensor] = {}
    try:
        for m, members in enumerate(hierarchy.members):
            layout.load_into(server_w, state)
            compute.append([])
            for sub_round in range(hierarchy.local_rounds):
                participation = loop.store.record_participation(members, round_idx)
                update, seconds = _train(loop, round_idx, members, participation, sub_round=sub_round,
                                         local_epochs=int(hierarchy.epochs[m]), where=f" (institution {m})")
                compute[m].append(seconds)
                weights, _ = fedavg_weights(update.num_samples.to(server_w.device))
                layout.load_into(weighted_average(update.weights, weights.to(server_w.dtype)), state)
                for name, value in update.int_state.items():
                    state[name].copy_(value)
                steps[m] += int(update.num_steps.max())
            institution_w[m] = layout.flatten(state)
            if m == 0:
                int_state = {name: state[name].clone() for name in layout.other_names}
            sizes[m] = int(update.num_samples.sum())
            p = update.num_samples.double() / update.num_samples.sum()
            acc[m], loss[m] = (p * update.train_acc).sum(), (p * update.train_loss).sum()
            hists.append(update.label_hist.sum(0))
    finally:
        layout.load_into(server_w, state)  # the server model stays w^(c) until aggregation
    hierarchy.participation += 1
    institution_update = CohortUpdate(
        round_idx=round_idx, client_ids=torch.arange(num_institutions), weights=institution_w, int_state=int_state,
        num_samples=sizes, num_steps=steps, train_acc=acc, train_loss=loss,
        participation=hierarchy.participation.clone(), label_hist=torch.stack(hists),
    )
    clients_trained = sum(len(m) for m in hierarchy.members) * hierarchy.local_rounds
    traffic = RoundTraffic(layout.numel * 4, {"client": clients_trained, "institution": num_institutions}, compute)
    return institution_update, traffic
