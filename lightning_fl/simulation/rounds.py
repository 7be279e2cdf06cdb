"""One communication round, flat or three-layer (Tempo), and every round hook's dispatch.

:class:`RoundRunner` is the only place that calls the federated callbacks' round hooks
(``on_federation_setup``, ``on_round_start``, ``aggregate``, ``on_round_end``,
``on_clients_evaluated``) and applies the :class:`~lightning_fl.simulation.round_result.RoundPlan` they return.
The :class:`~lightning_fl.simulation.loop.FederatedLoop` owns it and calls it from the Lightning hooks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
from pytorch_lightning.utilities import rank_zero_warn
from torch import Tensor

from lightning_fl.aggregation.attacks import Attack, Scale
from lightning_fl.aggregation.pipeline import AggregationPipeline
from lightning_fl.engines.base import ClientEngine, num_local_steps
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.engines.evaluation import ClientEvaluation, client_train_losses
from lightning_fl.engines.hooks import ClientHookSet
from lightning_fl.faults.validation import ConfigError, DivergenceError
from lightning_fl.models.base import ClientModule
from lightning_fl.privacy.config import DifferentialPrivacy
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import AggregationCallback, FederatedCallback
from lightning_fl.simulation.distributed import CohortSharding
from lightning_fl.simulation.federation import Federation
from lightning_fl.simulation.hierarchy import Hierarchy
from lightning_fl.simulation.round_result import RoundPlan, RoundResult, RoundTraffic
from lightning_fl.simulation.sampling import ClientSampler
from lightning_fl.simulation.system import ClientFates, SystemHeterogeneity
from lightning_fl.state.client_rows import RowStore
from lightning_fl.state.client_state import ClientStateStore
from lightning_fl.state.client_table import ClientTable


def _data_dependent_system(system: SystemHeterogeneity | None) -> list[str]:
    """The ``model.system`` settings under which who reports depends on more than keyed draws (refused by ``model.dp``).

    A deadline drops or cuts clients by their work, which grows with ``n_k``; straggler fractions and
    over-selection keep the first finishers, which also depends on ``n_k``. Availability and dropout are
    keyed draws, independent of the data.
    """
    if system is None:
        return []
    return [f"model.system.{name}" for name, on in (("deadline", system.deadline is not None),
                                                    ("straggler_fraction", system.straggler_fraction is not None),
                                                    ("over_selection", system.over_selection > 0)) if on]


class RoundRunner:
    """Samples, trains, aggregates and dispatches round hooks for a :class:`FederatedLoop`.

    Args:
        model: The global model (its weights are ``w^t`` between rounds).
        engine: The client engine, already set up.
        sampler: Cohort sampling.
        store: Participation counts and kept client optimizer states.
        hierarchy: Three-layer mode, or ``None``.
        federation: What callbacks may know about the run.
        callbacks: The trainer's federated callbacks, in order; exactly one is an aggregation callback.
        sharding: How the cohort is split over processes (default: one process trains it all).
        reduce: Exchange partial weighted sums instead of every client's weights (flat rounds with
            several processes and an aggregation callback that ``supports_reduce``).
        system: Simulated availability, dropout, stragglers and clock (flat rounds); ``None``: every
            sampled client trains all its local steps.
        pipeline: ``model.aggregation``, handed to the aggregation callback (``None``: the identity).
        attack: ``model.attack``, set up (its Byzantine clients drawn); it runs inside the pipeline.
        on_client_divergence: ``stop`` (raise :class:`DivergenceError` naming the round and client) or
            ``drop`` (discard diverged clients' updates, log them, go on; stop only if all diverged).
        dp: ``model.dp``: checked against the run, set up for ``rounds`` planned rounds, its stages put into
            the pipeline and its sampling into ``sampler`` (docs/algorithms.md, Client-level differential privacy).
        rounds: The planned rounds (``trainer.max_epochs``), which a target epsilon is calibrated over.

    Attributes:
        stop_requested: Set when ``model.dp.on_budget: stop`` ends the run (the loop stops the trainer).
    """

    def __init__(self, model: ClientModule, engine: ClientEngine, sampler: ClientSampler, store: ClientStateStore,
                 hierarchy: Hierarchy | None, federation: Federation, callbacks: Sequence[FederatedCallback],
                 sharding: CohortSharding | None = None, reduce: bool = False,
                 system: SystemHeterogeneity | None = None, on_client_divergence: str = "stop",
                 pipeline: AggregationPipeline | None = None, attack: Attack | None = None,
                 dp: DifferentialPrivacy | None = None, rounds: int = 1) -> None:
        self.model, self.engine, self.sampler, self.store = model, engine, sampler, store
        self.system, self.on_client_divergence = system, on_client_divergence
        self.fates: ClientFates | None = None  # the last flat round's, under a system model
        self.reduce = reduce
        self.sharding = sharding or CohortSharding()
        self.hierarchy = hierarchy
        self.federation = federation
        self.callbacks = list(callbacks)
        self.aggregator = next(c for c in self.callbacks if isinstance(c, AggregationCallback))
        self.hooks = ClientHookSet(self.callbacks)
        if reduce and (hierarchy is not None or not self.aggregator.supports_reduce):
            raise ConfigError(f"model.exchange: reduce needs an aggregation that only averages the clients' weights"
                              f" (FedAvg, FedProx, FedAvgM, FedAdam, FedYogi, FedAdagrad, FedFa, FedFaMo, DWFed) and no"
                              f" model.hierarchy; got {type(self.aggregator).__name__}"
                              f"{' with a hierarchy' if hierarchy is not None else ''}; use exchange: gather")
        pipeline = pipeline if pipeline is not None else AggregationPipeline()
        if attack is not None:  # set up by the loop: with a hierarchy its members are institutions
            pipeline.attack = attack
            if isinstance(attack, Scale):  # gamma = K / eta_s by default
                attack.cohort_size = sampler.clients_per_round if hierarchy is None else hierarchy.num_institutions
        self.dp, self.stop_requested = dp, False
        if dp is not None:  # before the checks below: its stages need every row, and it may set Poisson sampling
            dp.setup(federation.num_clients, sampler.clients_per_round, federation.train_sizes, rounds)
            dp.install(pipeline, type(self.aggregator).__name__, self.aggregator.init_args,
                       [type(c).__name__ for c in self.callbacks], hierarchy=hierarchy is not None,
                       system=_data_dependent_system(system), sampling=sampler.mode,
                       own_weights=self.aggregator.dp_own_weights)
            if dp.sampling == "poisson" and not dp.local:  # local DP claims no amplification: model.sampling stays
                sampler.use_poisson(dp.q)
        if reduce and pipeline.needs_every_row:
            raise ConfigError("model.exchange: reduce exchanges partial sums, but model.aggregation or model.attack needs every"
                              " client's update (a transform, pre-aggregator, robust rule or row attack); use exchange: gather")
        if hierarchy is None:
            pipeline.setup(sampler.clients_per_round)
        else:  # the server's cohort is the institutions
            pipeline.setup(hierarchy.num_institutions, "model.hierarchy.num_institutions")
        self.aggregator.use_pipeline(pipeline)
        if hierarchy is not None and not self.aggregator.supports_hierarchy:
            raise ConfigError(f"{type(self.aggregator).__name__} cannot aggregate institutions in model.hierarchy mode"
                              " (its server step needs per-client updates); use FedAvg, FedProx, FedAvgM, FedAdam, FedYogi,"
                              " FedAdagrad or FedAdp")

    # ------------------------------------------------------------------ hooks
    def setup_callbacks(self, training: bool, make_rows: Callable[[ClientTable], RowStore] | None = None) -> None:
        """Bind declared per-client state (model size, row store); on ``training``, let callbacks check the run."""
        for callback in self.callbacks:
            callback.bind_client_state(self.federation.layout.numel, make_rows)
        if self.hierarchy is not None:  # the institutions' own per-client state (FedAdp angles)
            self.hierarchy.aggregation.bind_client_state(self.federation.layout.numel, make_rows)
        for callback in self.callbacks if training else ():
            callback.on_federation_setup(self.federation)

    def _apply(self, plan: RoundPlan | None, source: FederatedCallback) -> None:
        if plan is None or plan.institution_epochs is None:
            return
        if self.hierarchy is None:
            raise ConfigError(f"{type(source).__name__} sets institution epochs, which needs model.hierarchy")
        self.hierarchy.set_epochs(plan.institution_epochs)

    def _round_start(self, round_idx: int, client_ids: Tensor, log: RoundLogger) -> None:
        for callback in self.callbacks:
            self._apply(callback.on_round_start(round_idx, client_ids, self.federation, log), callback)

    def finish(self, result: RoundResult, log: RoundLogger) -> None:
        """``on_round_end`` of every callback, in order (after the loop logged the round)."""
        for callback in self.callbacks:
            self._apply(callback.on_round_end(result.round_idx, result, self.federation, log), callback)

    def evaluated(self, round_idx: int, evaluation: ClientEvaluation, log: RoundLogger) -> None:
        """``on_clients_evaluated`` of every callback."""
        for callback in self.callbacks:
            callback.on_clients_evaluated(round_idx, evaluation, self.federation, log)

    def _vectors(self) -> tuple[int, int]:
        """Model-sized vectors ``(down, up)`` per member of the aggregation's cohort (communication accounting)."""
        return self.aggregator.vectors_down, self.aggregator.vectors_up

    # ------------------------------------------------------------------ one round
    def run(self, round_idx: int, log: RoundLogger) -> RoundResult | None:
        """Round ``t``: train the cohort (or the institutions), aggregate, load ``w^{t+1}`` into the model.

        Returns ``None`` for an empty round (no client reported under ``model.system``): the global
        model and every callback's state stay as they were.
        """
        started = time.perf_counter()
        self._diverged = 0
        if self.dp is not None and self._budget_spent(round_idx):  # a resumed run past its budget
            return None
        if self.hierarchy is None:
            trained = self._flat_round(round_idx, log)
            if trained is None:
                if self.dp is not None:  # an empty DP round still releases w^t + noise, and counts
                    self._aggregate(round_idx, None, log)
                    self._account(round_idx, log)
                return None
            update, traffic = trained
        else:
            update, traffic = self._hierarchical_round(round_idx, log)
        if self.on_client_divergence == "drop":
            log.log_scalars({"clients/diverged": float(self._diverged)})
        new_w = self._aggregate(round_idx, update, log)
        if self.dp is not None:
            self._account(round_idx, log)
        return RoundResult(round_idx, update, new_w, traffic, time.perf_counter() - started)

    def _budget_spent(self, round_idx: int) -> bool:
        """Whether ``model.dp.on_budget: stop`` ends the run before round ``round_idx`` (said in one line)."""
        message = self.dp.budget_message(round_idx)
        if message is not None:
            rank_zero_warn(message)
            self.stop_requested = True
        return message is not None

    def _account(self, round_idx: int, log: RoundLogger) -> None:
        self.dp.log_round(log)
        self._budget_spent(round_idx + 1)

    def _aggregate(self, round_idx: int, update: CohortUpdate | None, log: RoundLogger) -> Tensor:
        """``w^{t+1}`` from ``update``, loaded into the model; ``None``: an empty DP round (``w^t`` plus the noise)."""
        layout = self.federation.layout
        state = self.model.state_dict()
        # Server-side math is fp32 whatever the training precision (docs/algorithms.md, Server arithmetic).
        with torch.autocast(self.federation.device.type, enabled=False), torch.no_grad():
            global_w = layout.flatten(state)
            if update is None:
                new_w = self.aggregator.aggregate_empty(round_idx, global_w, self.federation, log)
            else:
                new_w = self.aggregator.aggregate(round_idx, global_w, update, self.federation, log)
            if not bool(torch.isfinite(new_w).all()):
                clients = [] if update is None else update.client_ids.tolist()
                raise DivergenceError(
                    f"round {round_idx + 1}: {type(self.aggregator).__name__} produced non-finite global weights from"
                    f" clients {clients}; stopping before the global model or any checkpoint is overwritten")
            layout.load_into(new_w, state)
            # Under model.dp integer buffers keep w^t's values: the first member's depend on its data.
            for name, value in (update.int_state.items() if update is not None and self.dp is None else ()):
                state[name].copy_(value)
        return new_w

    def _train(self, round_idx: int, client_ids: Tensor, participation: Tensor, log: RoundLogger, *,
               sub_round: int = 0, local_epochs: int | None = None, num_steps: Tensor | None = None,
               where: str = "", **passes) -> tuple[CohortUpdate, float]:
        """Train ``client_ids``; drop or stop on diverged clients; keep the survivors' optimizer states.

        ``passes`` (``hooks``, ``start_rows``, ``frozen``, ``stream``, ``batch_repeats``) describe a
        personalization pass (:meth:`~lightning_fl.simulation.callback.AggregationCallback.train_round`);
        by default the run's hooks.
        """
        started = time.perf_counter()
        passes.setdefault("hooks", self.hooks)
        if self.sharding.active:
            update = self._train_shard(round_idx, client_ids, participation, sub_round, local_epochs, num_steps,
                                       **passes)
        else:
            update = self.engine.train_cohort(round_idx, client_ids, participation, sub_round=sub_round,
                                              local_epochs=local_epochs, num_steps=num_steps, **passes)
        elapsed = time.perf_counter() - started
        update = self._without_diverged(round_idx, update, log, where)
        self.store.commit(update.client_ids)
        # Clients train in parallel in a deployment: the round waits for the one with the most steps.
        steps = update.num_steps.double()
        return update, elapsed * float(steps.max() / steps.sum().clamp_min(1))

    def _without_diverged(self, round_idx: int, update: CohortUpdate, log: RoundLogger, where: str) -> CohortUpdate:
        """``update`` without its diverged clients (``on_client_divergence: drop``), or a ``DivergenceError``."""
        bad = update.non_finite_clients()
        if not bad:
            return update
        if self.on_client_divergence == "stop":
            client_id, what = bad[0]
            raise DivergenceError(
                f"round {round_idx + 1}: client {client_id}{where} diverged ({what}); stopping before aggregation, so"
                " the global model and saved checkpoints are untouched (lower the client lr, or set"
                " model.on_client_divergence: drop to discard diverged clients)")
        named = ", ".join(f"{k} ({what})" for k, what in bad)
        if len(bad) == update.cohort_size:
            raise DivergenceError(
                f"round {round_idx + 1}: every client{where} diverged ({named}); stopping before aggregation, so the"
                " global model and saved checkpoints are untouched (lower the client lr?)")
        self._diverged += len(bad)
        message = f"round {round_idx + 1}: discarded the updates of diverged clients {named}{where}"
        rank_zero_warn(message)
        log.log_text("clients/diverged_names", message)
        return update.select(~torch.isin(update.client_ids, torch.tensor([k for k, _ in bad])))

    def _train_shard(self, round_idx: int, client_ids: Tensor, participation: Tensor, sub_round: int,
                     local_epochs: int | None, num_steps: Tensor | None, hooks: ClientHookSet,
                     start_rows: Tensor | None = None, **passes) -> CohortUpdate:
        """This rank trains its share of ``client_ids``; every rank gets the whole cohort's update back."""
        plan = self.engine.plan
        if num_steps is None:
            num_samples = self.federation.train_sizes[client_ids]
            num_steps = passes.get("batch_repeats", 1) * num_local_steps(num_samples, local_epochs or plan.local_epochs,
                                                                         plan.batch_size)
            budget = None
        else:
            budget = num_steps
        shards = self.sharding.assign(num_steps)
        mine = torch.tensor(shards[self.sharding.rank], dtype=torch.long)
        loss_before = None
        if hooks.requires_loss_before:  # measured on the whole cohort, exactly as one process does
            loss_before = client_train_losses(self.model, self.engine.data, self.engine.rows(client_ids))[mine]
        local = self.engine.train_cohort(round_idx, client_ids[mine], participation[mine], hooks,
                                         cohort_size=len(client_ids), sub_round=sub_round, local_epochs=local_epochs,
                                         loss_before=loss_before, num_steps=None if budget is None else budget[mine],
                                         start_rows=None if start_rows is None else start_rows[mine.to(start_rows.device)],
                                         **passes)
        kept = self.store.keep_optimizer_state
        return self.sharding.gather(
            local, shards, client_ids, what=f"round {round_idx + 1}", reduce=self.reduce and self.hierarchy is None,
            kept_states=(lambda ids: {k: self.store.optimizer_state(k) for k in ids}) if kept else None,
            keep_state=self.store.save_optimizer_state if kept else None)

    def _flat_round(self, round_idx: int, log: RoundLogger) -> tuple[CohortUpdate, RoundTraffic] | None:
        """Sample a cohort and train it from the global model; ``None`` when no client reports."""
        num_steps = None
        if self.system is None:
            client_ids = self.sampler.sample(round_idx)
            if len(client_ids) == 0:  # Poisson sampling (model.dp) drew nobody
                log.log_text("clients/empty_round", f"round {round_idx + 1}: Poisson sampling drew no client; the"
                             " global model moves by the DP noise alone")
                return None
        else:
            self.fates = fates = self.system.fates(round_idx, self.sampler)
            self.system.elapsed_seconds += fates.round_seconds
            log.log_scalars({**fates.metrics(), "sim/round_seconds": fates.round_seconds,
                             "sim/elapsed_seconds": self.system.elapsed_seconds})
            if fates.empty:
                log.log_text("clients/empty_round", f"round {round_idx + 1}: no client reported ({fates.num_available}"
                             f" online, {len(fates.sampled)} sampled, {len(fates.dropped)} dropped out,"
                             f" {len(fates.stragglers)} stragglers); the global model "
                             f"{'moves by the DP noise alone' if self.dp is not None else 'is unchanged'}")
                return None
            client_ids, num_steps = fates.client_ids, fates.num_steps
        if self.engine.source is not None:  # a lazy federation: the cohort's samples, on the training device
            self.engine.stage(client_ids)
        participation = self.store.upcoming_participation(client_ids)
        self._round_start(round_idx, client_ids, log)
        seconds = [0.0]

        def train(ids: Tensor, counts: Tensor, **kwargs) -> CohortUpdate:  # one pass; a method may run several
            update, elapsed = self._train(round_idx, ids, counts, log, **{"num_steps": num_steps, **kwargs})
            seconds[0] += elapsed
            return update

        update = self.aggregator.train_round(train, round_idx, client_ids, participation, self.federation)
        compute = seconds[0]
        self.store.record_participation(update.client_ids, round_idx)  # f_k counts completed participations
        traffic = RoundTraffic(self.federation.layout.numel * 4, {"client": len(update.client_ids)}, [[compute]],
                               {"client": self._vectors()})
        return update, traffic

    def _hierarchical_round(self, round_idx: int, log: RoundLogger) -> tuple[CohortUpdate, RoundTraffic]:
        """One global iteration of the hierarchy (docs/algorithms.md, Three-layer hierarchy, eqs. 3-7).

        Every institution starts from ``w^(c)``; for ``tau_i`` rounds all its clients train
        ``epochs[m]`` epochs from the institution model, which becomes their ``|D_n|``-weighted
        average (or their FedAdp aggregate: ``hierarchy.institution_aggregation``), through the institution's
        pipeline (``hierarchy.institution_pipeline``). The global model is restored to ``w^(c)`` afterwards, so the aggregation callback
        sees the institutions as its cohort: ``weights`` are the institution models, ``num_samples``
        their ``|D^(m)|``.
        """
        hierarchy, layout = self.hierarchy, self.federation.layout
        state = self.model.state_dict()
        server_w = layout.flatten(state).clone()
        all_clients = torch.cat(hierarchy.members).sort().values
        self._round_start(round_idx, all_clients, log)
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
                    participation = self.store.record_participation(members, round_idx)
                    update, seconds = self._train(round_idx, members, participation, log, sub_round=sub_round,
                                                  local_epochs=int(hierarchy.epochs[m]), where=f" (institution {m})")
                    compute[m].append(seconds)
                    start_w = layout.flatten(state)  # the institution model its clients started from
                    new_w = hierarchy.aggregation.combine(start_w, update, m, round_idx, self.federation.seed, log)
                    layout.load_into(new_w, state)
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
            round_idx=round_idx, client_ids=torch.arange(num_institutions), weights=institution_w,
            int_state=int_state, num_samples=sizes, num_steps=steps, train_acc=acc, train_loss=loss,
            participation=hierarchy.participation.clone(), label_hist=torch.stack(hists),
        )
        clients_trained = sum(len(m) for m in hierarchy.members) * hierarchy.local_rounds
        # Institutions exchange plain weights with their clients; the server's aggregation decides the top link.
        traffic = RoundTraffic(layout.numel * 4, {"client": clients_trained, "institution": num_institutions},
                               compute, {"institution": self._vectors()})
        return institution_update, traffic
