"""The vectorized client engine: a whole cohort (or a chunk of it) trains in lock step.

Local training (docs/algorithms.md, Local training) has every client train ``tau_k = E * ceil(n_k / B)`` minibatch steps from ``w^t`` with
the configured client optimizer. Here the clients' parameters are stacked along a leading cohort
dimension ``(C, *shape)`` and each local step is one batched forward/backward over all ``C`` clients
(see :mod:`lightning_fl.engines.formulation`), followed by one ``step()`` of the configured optimizer
on the stacked tensors, which is the per-client optimizer exactly because only element-wise
optimizers are accepted (:mod:`lightning_fl.engines.optimizers`). The objective
``sum_c (mean batch loss_c + hook term_c)`` has the same per-client gradients as the sequential
engine's per-client objective.

Unequal ``tau_k``: a chunk's clients are sorted by decreasing ``tau_k``, so at every step the clients
still training are a prefix. When clients finish, the parameters and the optimizer's per-client
state are replaced by views of that prefix: finished clients' rows are then neither computed nor
touched (not even by weight decay or momentum), with no per-step masking cost.

BatchNorm (:mod:`lightning_fl.engines.batched_bn`): each client's running statistics are rows
``(C, F)`` beside its parameters, bound to the formulation with them and updated in place by the
train-mode forward from the client's real samples only; they are written into the cohort weights as
parameters are. ``num_batches_tracked`` (an integer buffer) is the first cohort member's, as in the
sequential engine: ``w^t``'s count plus that client's ``tau_k``.

A plain LightningModule is trained through its own ``training_step`` under ``vmap``
(:mod:`lightning_fl.engines.user_step`), each client on its real samples only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import torch
import torch.nn.functional as F
from pytorch_lightning.utilities import rank_zero_info
from torch import Tensor
from torch.func import vmap
from torch.optim import Optimizer
from typing_extensions import override

from lightning_fl.engines.base import (
    ClientEngine,
    LocalTrainingPlan,
    distinct_steps,
    final_epoch_samples,
    output_rows,
)
from lightning_fl.engines.batched_bn import running_statistics, smallest_batch
from lightning_fl.engines.cohort import LocalTrainingContext
from lightning_fl.engines.cohort_accuracy import cohort_accuracies
from lightning_fl.engines.formulation import ModelAnalysis, analyse_model, build_forward, verify
from lightning_fl.engines.fused import FusedLinearChain
from lightning_fl.engines.hooks import ClientHookSet
from lightning_fl.engines.local_step import LocalStep
from lightning_fl.engines.optimizers import (
    client_state,
    load_state,
    narrow_leaves,
    optimizer_problem,
    plain_sgd_rate,
    stack_states,
    state_signature,
)
from lightning_fl.engines.schedule import ChunkSchedule, build_schedule
from lightning_fl.engines.sequential import SequentialEngine
from lightning_fl.engines.stacked import StackedClients
from lightning_fl.engines.staging import (
    FinalEpochStats,
    StagedBatches,
    per_sample_cross_entropy,
)
from lightning_fl.faults.validation import ConfigError
from lightning_fl.models.base import ClientModule
from lightning_fl.models.user_module import is_user_module, quiet_logging
from lightning_fl.engines.user_step import UserStackedClients, UserStepForward, user_step_problem
from lightning_fl.state.client_state import ClientStateStore
from lightning_fl.state.data import ClientData, FederatedData


class VectorizedEngine(ClientEngine):
    """Trains the cohort in chunks of at most ``max_parallel_clients`` clients, each chunk at once.

    Args:
        plan: Local training configuration.
        strict: Raise ``ConfigError`` when the model or optimizer cannot be vectorized (``engine:
            vectorized``); otherwise (``engine: auto``) log why and train sequentially.
    """

    name = "vectorized"

    def __init__(self, plan: LocalTrainingPlan, strict: bool = True) -> None:
        super().__init__(plan)
        self.strict = strict
        self.fallback: SequentialEngine | None = None
        self.forward = None

    @override
    def setup(self, model: ClientModule, data: FederatedData, store: ClientStateStore,
              source: ClientData | None = None) -> None:
        super().setup(model, data, store, source)
        self.fallback, self.name = None, type(self).name
        self.user = is_user_module(model)
        analysis = _user_analysis(model, data) if self.user else analyse_model(model, self.plan.precision)
        problem = optimizer_problem(self.plan.optimizer_factory) or (None if analysis.kinds else analysis.reason)
        failures = []
        if self.user and problem is None:  # _user_analysis ran the set-up check already
            self.forward, analysis = UserStepForward(model), replace(analysis, kinds=())
        for kind in analysis.kinds if problem is None else ():
            forward = build_forward(kind, model)
            issue = verify(forward, model, data.x_train[:3], data.y_train[:3])
            if issue is None:
                self.forward = forward
                break
            failures.append(issue)
        else:
            problem = problem or ("; ".join(failures) if failures or not self.user else None)
        if problem is not None:
            if self.strict:
                raise ConfigError(f"engine: vectorized cannot train this run ({problem}); use engine: sequential")
            rank_zero_info(f"Client engine: sequential (vectorized set-up check: {problem})")
            self.name = SequentialEngine.name  # what actually trains, for logs and checks
            self.fallback = SequentialEngine(self.plan)
            self.fallback.setup(model, data, store, source)
            return
        self._named = [(n, p.requires_grad) for n, p in model.named_parameters()]
        # BatchNorm running statistics train per client beside the parameters; other float buffers are constant.
        self._stats, self._counters = running_statistics(model)
        names = {n for n, _ in self._named} | set(self._stats)
        self._constant = [e for e in self.layout.float_entries if e.name not in names]
        self._default_loss = self.user or type(model).loss is ClientModule.loss
        self._sizes, self._offsets = data.train_sizes().tolist(), data.train_offsets.tolist()
        rank_zero_info(f"Vectorized engine: {self.forward.kind} formulation ({analysis.reason})")

    @override
    def bind(self, data: FederatedData, client_ids: Tensor) -> None:
        super().bind(data, client_ids)
        if self.fallback is not None:
            self.fallback.bind(data, client_ids)
        self._sizes, self._offsets = data.train_sizes().tolist(), data.train_offsets.tolist()

    @override
    def _train(self, ctx: LocalTrainingContext, hooks: ClientHookSet
               ) -> tuple[Tensor, dict[str, Tensor], Tensor, Tensor, dict[str, Tensor]]:
        if self.fallback is not None:
            self.fallback.plan = self.plan  # follows per-call overrides (Tempo's local epochs)
            return self.fallback._train(ctx, hooks)
        num_clients, device = ctx.num_clients, self.model.device
        weights = output_rows(ctx.start_rows, num_clients, self.layout.numel, device)
        train_acc = torch.zeros(num_clients, dtype=torch.float64)
        train_loss = torch.zeros(num_clients, dtype=torch.float64)
        extra_parts = []
        for positions, saved in self._chunks(ctx):
            with quiet_logging(self.model) if self.user else _nothing():
                full, acc, loss, extra = self._train_chunk(ctx, positions, saved, hooks)
            index = torch.tensor(positions)
            start = None if ctx.start_rows is None else ctx.start_rows[index.to(ctx.start_rows.device)]
            self._write_rows(weights, index.to(device), full, start)
            del full  # the chunk's parameters: freed before the next chunk trains
            train_acc[index], train_loss[index] = acc, loss
            extra_parts.append((index, extra))
        # Integer buffers are the first member's (docs/algorithms.md, Notation): w^t's, except that
        # each BatchNorm counter has counted that client's tau_k train-mode steps.
        state = self.model.state_dict() if self.layout.other_names else {}
        first = int(ctx.num_steps[0]) if num_clients else 0
        int_state = {n: state[n] + first if n in self._counters else state[n].clone() for n in self.layout.other_names}
        return weights, int_state, train_acc, train_loss, _merge_extras(extra_parts, num_clients)

    @override
    def _trained_accuracy(self, client_ids: Tensor, weights: Tensor) -> Tensor:
        """The trained rows evaluated with the cohort formulation, a chunk at a time (no per-client loop)."""
        if self.fallback is not None:
            return super()._trained_accuracy(client_ids, weights)
        ids = self.rows(client_ids).tolist()
        bound = {n for n, _ in self._named} | set(self._stats)  # each row's BN statistics normalise its samples
        return cohort_accuracies(self.forward, self.layout, weights, bound, self.data.x_train, self.data.y_train,
                                 [self._offsets[k] for k in ids], [self._sizes[k] for k in ids],
                                 self.plan.max_parallel_clients)

    def _chunks(self, ctx: LocalTrainingContext) -> list[tuple[list[int], list | None]]:
        """Cohort positions per chunk (by decreasing ``n_k``), with the clients' saved optimizer states.

        Kept optimizer states can only share a stacked optimizer when their shared scalars (e.g.
        Adam's step count) agree, so clients are first grouped by :func:`state_signature`.
        """
        ids, rows = ctx.client_ids.tolist(), self.rows(ctx.client_ids).tolist()
        saved = [self.store.optimizer_state(k) for k in ids]
        groups: dict[object, list[int]] = {}
        for position, state in enumerate(saved):
            groups.setdefault(state_signature(state), []).append(position)
        limit = self.plan.max_parallel_clients or len(ids)
        steps = ctx.num_steps.tolist()
        chunks = []
        for signature, positions in groups.items():
            # By decreasing tau_k (the schedule trains a shrinking prefix), then n_k, then position.
            positions.sort(key=lambda p: (-steps[p], -self._sizes[rows[p]], p))
            for start in range(0, len(positions), limit):
                part = positions[start : start + limit]
                chunks.append((part, None if signature is None else [saved[p] for p in part]))
        return chunks

    def _train_chunk(self, ctx: LocalTrainingContext, positions: list[int], saved: list | None,
                     hooks: ClientHookSet) -> tuple[dict[str, Tensor], Tensor, Tensor, dict[str, Tensor]]:
        plan, device = self.plan, self.model.device
        num = len(positions)
        index = torch.tensor(positions)
        ids = ctx.client_ids[index]
        rows = self.rows(ids).tolist()  # where the chunk's samples are in self.data
        sizes = [self._sizes[r] for r in rows]
        chunk = replace(  # the chunk's clients, with every pass option of ctx and a cache of its own
            ctx, client_ids=ids, num_steps=ctx.num_steps[index], cache={},
            active=torch.ones(num, dtype=torch.bool, device=device),
            start_rows=None if ctx.start_rows is None else ctx.start_rows[index.to(ctx.start_rows.device)])
        id_list = ids.tolist()
        schedule = build_schedule(seed=plan.seed, round_idx=ctx.round_idx, sub_round=ctx.sub_round, client_ids=id_list,
                                  sizes=sizes, offsets=[self._offsets[r] for r in rows],
                                  local_epochs=plan.local_epochs, batch_size=plan.batch_size, device=device,
                                  num_steps=ctx.num_steps[index].tolist(), stream=ctx.stream,
                                  batch_repeats=ctx.batch_repeats)
        fused = not self.user and isinstance(self.forward, FusedLinearChain)
        with torch.no_grad():  # views made without autograd's view bookkeeping: half the cost of a split
            batches = StagedBatches(schedule, self.data.x_train, self.data.y_train,
                                    self.model.num_classes if fused else None)
        final_stats = FinalEpochStats(schedule, batches)
        # Every client starts from w^t (or its start row); `full` holds all C rows, the optimizer sees the active prefix.
        state = self.model.state_dict()
        if chunk.start_rows is None:
            full = {n: p.detach().unsqueeze(0).repeat(num, *[1] * p.dim()) for n, p in self.model.named_parameters()}
            stats = {n: state[n].float().unsqueeze(0).repeat(num, 1) for n in self._stats}
        else:
            start = self.layout.unflatten(chunk.start_rows)
            full = {n: start[n].to(p.dtype).clone() for n, p in self.model.named_parameters()}
            stats = {n: start[n].float().clone() for n in self._stats}
        if self._stats:
            distinct = distinct_steps(ctx.num_steps[index], ctx.batch_repeats).tolist()  # repeats see the same batch
            self.forward.start_pass(state, smallest_batch(sizes, distinct, plan.batch_size))
        leaves = [full[n].detach().requires_grad_(trainable and n not in ctx.frozen) for n, trainable in self._named]
        optimizer = plan.optimizer_factory(leaves)
        if saved is not None:
            load_state(optimizer, stack_states(saved, [p.shape for p in self.model.parameters()]), plan.lr)
        hooks.on_local_train_start(chunk)
        # The hand-written path needs no autograd graph (a hook's loss term enables it locally).
        with torch.no_grad() if fused else torch.enable_grad():
            kept, user_losses = self._steps(chunk, schedule, batches, final_stats, full, stats, leaves, optimizer,
                                            hooks)
        for row, client in enumerate(ids.tolist()):
            if kept:
                self.store.save_optimizer_state(client, kept[row])
        chunk.active[:] = False
        extra = hooks.on_local_train_end(chunk, full)
        per_sample = per_sample_cross_entropy if self._default_loss else self._per_sample_loss
        if self.user:  # training_step gives losses, no predictions
            correct, loss_sum = torch.full((num,), float("nan"), dtype=torch.float64), user_losses.cpu()
        else:
            correct, loss_sum = final_stats.totals(per_sample, num)
        seen = final_epoch_samples(torch.tensor(sizes), distinct_steps(ctx.num_steps[index], ctx.batch_repeats),
                                   plan.batch_size).double()
        return {**full, **stats}, correct / seen, loss_sum / seen, extra

    def _steps(self, chunk: LocalTrainingContext, schedule: ChunkSchedule, batches: StagedBatches,
               stats: FinalEpochStats, full: dict[str, Tensor], running: dict[str, Tensor], leaves: list[Tensor],
               optimizer: Optimizer, hooks: ClientHookSet) -> tuple[dict[int, dict], Tensor | None]:
        """Every local step of a chunk; returns the kept per-client optimizer states (if kept) and, for a
        plain LightningModule, each client's summed final-epoch losses."""
        keep, kept = self.store.keep_optimizer_state, {}
        local_step = LocalStep(hooks, optimizer, self._make_scaler(), self.plan.step_lr)
        if self.user:
            target = UserStackedClients(self.forward, schedule, full, leaves, batches, self.plan.batch_size)
        else:
            target = StackedClients(self.forward, self._per_sample_loss, self.plan.precision, full, leaves, batches,
                                    running)
        # One Linear under plain SGD and no per-step hook: each run of steps with the same clients in one loop.
        rate = (plain_sgd_rate(optimizer) if isinstance(target, StackedClients) and target.fused
                and target.forward.single_linear and local_step.bare and batches.by_client is not None else None)
        steps = _runs(schedule.active) if rate is not None else enumerate(schedule.active)
        for step, now in steps:
            if now != target.active:  # the last clients finished: train only the prefix from now on
                if keep:
                    kept.update({r: client_state(optimizer, target.leaves, r) for r in range(now, target.active)})
                target.narrow(narrow_leaves(optimizer, target.leaves, [full[n][:now] for n in full]))
                chunk.active[now : len(chunk.active)] = False
            if rate is not None:  # `step` is a range here
                target.plain_sgd_steps(step, rate, stats.wants, stats.buffer)
                chunk.step, chunk.step_lr = step[-1], chunk.lr
                continue
            target.step = step
            target.stats_buffer = (lambda offset, s=step: stats.buffer(s, offset)) if stats.wants[step] else None
            logits = local_step(chunk, target, step)
            if stats.wants[step] and logits is not None:
                stats.record(step, logits)
        if keep:
            kept.update({r: client_state(optimizer, target.leaves, r) for r in range(target.active)})
        return kept, getattr(target, "loss_sums", None)

    def _per_sample_loss(self, logits: Tensor, y: Tensor) -> Tensor:
        if self._default_loss:
            return F.cross_entropy(logits.float(), y, reduction="none")
        # A custom ClientModule.loss is assumed to be a mean of per-sample terms (as the default).
        return vmap(lambda out, target: self.model.loss(out.unsqueeze(0), target.unsqueeze(0)))(logits, y).float()

    def _write_rows(self, weights: Tensor, rows: Tensor, full: dict[str, Tensor], start: Tensor | None) -> None:
        """Copy a chunk's parameters and running statistics into ``weights[rows]`` entry by entry (no
        ``(C, d)`` temporary); other float buffers (never trained) keep their start value: ``w^t``'s, or
        each client's start row."""
        state = self.model.state_dict() if self._constant and start is None else {}
        for entry in self.layout.float_entries:
            if entry.name in full:
                source = full[entry.name]
            elif start is not None:
                source = start[:, entry.start : entry.stop]
            else:
                source = state[entry.name].unsqueeze(0)
            weights[rows, entry.start : entry.stop] = source.reshape(source.shape[0], -1).to(weights.dtype)


def _runs(active: list[int]) -> list[tuple[range, int]]:
    """``[(steps, clients training), ...]``: the maximal runs of consecutive steps with the same clients."""
    runs, start = [], 0
    for step in range(1, len(active) + 1):
        if step == len(active) or active[step] != active[start]:
            runs.append((range(start, step), active[start]))
            start = step
    return runs


def _merge_extras(parts: list[tuple[Tensor, dict[str, Tensor]]], num_clients: int) -> dict[str, Tensor]:
    """Stack per-chunk hook statistics back into cohort order."""
    merged: dict[str, Tensor] = {}
    for index, extra in parts:
        for key, value in extra.items():
            if key not in merged:
                merged[key] = value.new_empty((num_clients, *value.shape[1:]))
            merged[key][index.to(value.device)] = value
    return merged


def _user_analysis(model: torch.nn.Module, data: FederatedData) -> ModelAnalysis:
    """A plain LightningModule: its ``training_step`` under ``vmap`` if the set-up check passes."""
    if running_statistics(model)[0]:
        return ModelAnalysis((), "BatchNorm running statistics cannot be updated per client under vmap")
    problem = user_step_problem(model, data.x_train[:3], data.y_train[:3])
    return ModelAnalysis((), problem) if problem else ModelAnalysis(("training_step",), "training_step under vmap")


@contextmanager
def _nothing() -> Iterator[None]:
    yield
