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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
import torch.nn.functional as F
from pytorch_lightning.utilities import rank_zero_info
from torch import Tensor
from torch.func import vmap
from torch.optim import Optimizer
from typing_extensions import override

from lightning_fl.engines.base import ClientEngine, LocalTrainingPlan, distinct_steps, final_epoch_samples
from lightning_fl.engines.cohort import LocalTrainingContext
from lightning_fl.engines.cohort_accuracy import cohort_accuracies
from lightning_fl.engines.formulation import analyse_model, build_forward, verify
from lightning_fl.engines.fused import FusedLinearChain
from lightning_fl.engines.hooks import ClientHookSet
from lightning_fl.engines.local_step import LocalStep, LossTerm, StepTarget
from lightning_fl.engines.optimizers import (
    client_state,
    load_state,
    narrow_leaves,
    optimizer_problem,
    stack_states,
    state_signature,
)
from lightning_fl.engines.schedule import ChunkSchedule, build_schedule
from lightning_fl.engines.sequential import SequentialEngine
from lightning_fl.engines.staging import (
    FinalEpochStats,
    StagedBatches,
    per_sample_cross_entropy,
)
from lightning_fl.faults.validation import ConfigError
from lightning_fl.models.base import ClientModule
from lightning_fl.state.client_state import ClientStateStore
from lightning_fl.state.data import FederatedData

_AUTOCAST = {"bf16-mixed": torch.bfloat16, "bf16": torch.bfloat16, "16-mixed": torch.float16, "16": torch.float16}


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
    def setup(self, model: ClientModule, data: FederatedData, store: ClientStateStore) -> None:
        super().setup(model, data, store)
        self.fallback, self.name = None, type(self).name
        analysis = analyse_model(model, self.plan.precision)
        problem = optimizer_problem(self.plan.optimizer_factory) or (None if analysis.kinds else analysis.reason)
        failures = []
        for kind in analysis.kinds if problem is None else ():
            forward = build_forward(kind, model)
            issue = verify(forward, model, data.x_train[:3], data.y_train[:3])
            if issue is None:
                self.forward = forward
                break
            failures.append(issue)
        else:
            problem = problem or "; ".join(failures)
        if problem is not None:
            if self.strict:
                raise ConfigError(f"engine: vectorized cannot train this run ({problem}); use engine: sequential")
            rank_zero_info(f"Client engine: sequential (vectorized set-up check: {problem})")
            self.name = SequentialEngine.name  # what actually trains, for logs and checks
            self.fallback = SequentialEngine(self.plan)
            self.fallback.setup(model, data, store)
            return
        self._named = [(n, p.requires_grad) for n, p in model.named_parameters()]
        names = {n for n, _ in self._named}
        self._constant = [e for e in self.layout.float_entries if e.name not in names]  # float buffers
        self._default_loss = type(model).loss is ClientModule.loss
        self._sizes, self._offsets = data.train_sizes().tolist(), data.train_offsets.tolist()
        rank_zero_info(f"Vectorized engine: {self.forward.kind} formulation ({analysis.reason})")

    @override
    def _train(self, ctx: LocalTrainingContext, hooks: ClientHookSet
               ) -> tuple[Tensor, dict[str, Tensor], Tensor, Tensor, dict[str, Tensor]]:
        if self.fallback is not None:
            self.fallback.plan = self.plan  # follows per-call overrides (Tempo's local epochs)
            return self.fallback._train(ctx, hooks)
        num_clients, device = ctx.num_clients, self.model.device
        weights = torch.empty(num_clients, self.layout.numel, device=device)
        train_acc = torch.zeros(num_clients, dtype=torch.float64)
        train_loss = torch.zeros(num_clients, dtype=torch.float64)
        extra_parts = []
        for positions, saved in self._chunks(ctx):
            full, acc, loss, extra = self._train_chunk(ctx, positions, saved, hooks)
            index = torch.tensor(positions)
            start = None if ctx.start_rows is None else ctx.start_rows[index.to(ctx.start_rows.device)]
            self._write_rows(weights, index.to(device), full, start)
            del full  # the chunk's parameters: freed before the next chunk trains
            train_acc[index], train_loss[index] = acc, loss
            extra_parts.append((index, extra))
        # Integer buffers are never trained here (no BatchNorm): the first member's equal the global ones.
        state = self.model.state_dict() if self.layout.other_names else {}
        int_state = {n: state[n].clone() for n in self.layout.other_names}
        return weights, int_state, train_acc, train_loss, _merge_extras(extra_parts, num_clients)

    @override
    def _trained_accuracy(self, client_ids: Tensor, weights: Tensor) -> Tensor:
        """The trained rows evaluated with the cohort formulation, a chunk at a time (no per-client loop)."""
        if self.fallback is not None:
            return super()._trained_accuracy(client_ids, weights)
        ids = client_ids.tolist()
        return cohort_accuracies(self.forward, self.layout, weights, {n for n, _ in self._named}, self.data.x_train,
                                 self.data.y_train, [self._offsets[k] for k in ids], [self._sizes[k] for k in ids],
                                 self.plan.max_parallel_clients)

    def _chunks(self, ctx: LocalTrainingContext) -> list[tuple[list[int], list | None]]:
        """Cohort positions per chunk (by decreasing ``n_k``), with the clients' saved optimizer states.

        Kept optimizer states can only share a stacked optimizer when their shared scalars (e.g.
        Adam's step count) agree, so clients are first grouped by :func:`state_signature`.
        """
        ids = ctx.client_ids.tolist()
        saved = [self.store.optimizer_state(k) for k in ids]
        groups: dict[object, list[int]] = {}
        for position, state in enumerate(saved):
            groups.setdefault(state_signature(state), []).append(position)
        limit = self.plan.max_parallel_clients or len(ids)
        steps = ctx.num_steps.tolist()
        chunks = []
        for signature, positions in groups.items():
            # By decreasing tau_k (the schedule trains a shrinking prefix), then n_k, then position.
            positions.sort(key=lambda p: (-steps[p], -self._sizes[ids[p]], p))
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
        sizes = [self._sizes[k] for k in ids.tolist()]
        chunk = replace(  # the chunk's clients, with every pass option of ctx and a cache of its own
            ctx, client_ids=ids, num_steps=ctx.num_steps[index], cache={},
            active=torch.ones(num, dtype=torch.bool, device=device),
            start_rows=None if ctx.start_rows is None else ctx.start_rows[index.to(ctx.start_rows.device)])
        id_list = ids.tolist()
        schedule = build_schedule(seed=plan.seed, round_idx=ctx.round_idx, sub_round=ctx.sub_round, client_ids=id_list,
                                  sizes=sizes, offsets=[self._offsets[k] for k in id_list],
                                  local_epochs=plan.local_epochs, batch_size=plan.batch_size, device=device,
                                  num_steps=ctx.num_steps[index].tolist(), stream=ctx.stream,
                                  batch_repeats=ctx.batch_repeats)
        fused = isinstance(self.forward, FusedLinearChain)
        batches = StagedBatches(schedule, self.data.x_train, self.data.y_train,
                                self.model.num_classes if fused else None)
        stats = FinalEpochStats(schedule, batches)
        # Every client starts from w^t (or its start row); `full` holds all C rows, the optimizer sees the active prefix.
        if chunk.start_rows is None:
            full = {n: p.detach().unsqueeze(0).repeat(num, *[1] * p.dim()) for n, p in self.model.named_parameters()}
        else:
            start = self.layout.unflatten(chunk.start_rows)
            full = {n: start[n].to(p.dtype).clone() for n, p in self.model.named_parameters()}
        leaves = [full[n].detach().requires_grad_(trainable and n not in ctx.frozen) for n, trainable in self._named]
        optimizer = plan.optimizer_factory(leaves)
        if saved is not None:
            load_state(optimizer, stack_states(saved, [p.shape for p in self.model.parameters()]), plan.lr)
        hooks.on_local_train_start(chunk)
        # The hand-written path needs no autograd graph (a hook's loss term enables it locally).
        with torch.no_grad() if fused else torch.enable_grad():
            kept = self._steps(chunk, schedule, batches, stats, full, leaves, optimizer, hooks)
        for row, client in enumerate(ids.tolist()):
            if kept:
                self.store.save_optimizer_state(client, kept[row])
        chunk.active[:] = False
        extra = hooks.on_local_train_end(chunk, full)
        correct, loss_sum = stats.totals(per_sample_cross_entropy if self._default_loss else self._per_sample_loss, num)
        seen = final_epoch_samples(torch.tensor(sizes), distinct_steps(ctx.num_steps[index], ctx.batch_repeats),
                                   plan.batch_size).double()
        return full, correct / seen, loss_sum / seen, extra

    def _steps(self, chunk: LocalTrainingContext, schedule: ChunkSchedule, batches: StagedBatches,
               stats: FinalEpochStats, full: dict[str, Tensor], leaves: list[Tensor], optimizer: Optimizer,
               hooks: ClientHookSet) -> dict[int, dict]:
        """Every local step of a chunk; returns the kept per-client optimizer states (if kept)."""
        keep, kept = self.store.keep_optimizer_state, {}
        local_step = LocalStep(hooks, optimizer, self._make_scaler(), self.plan.step_lr)
        target = _StackedClients(self, full, leaves, batches)
        for step, now in enumerate(schedule.active):
            if now != target.active:  # the last clients finished: train only the prefix from now on
                if keep:
                    kept.update({r: client_state(optimizer, target.leaves, r) for r in range(now, target.active)})
                target.narrow(narrow_leaves(optimizer, target.leaves, [full[n][:now] for n in full]))
                chunk.active[now : len(chunk.active)] = False
            target.step = step
            target.stats_buffer = (lambda offset, s=step: stats.buffer(s, offset)) if stats.wants[step] else None
            logits = local_step(chunk, target, step)
            if stats.wants[step]:
                stats.record(step, logits)
        if keep:
            kept.update({r: client_state(optimizer, target.leaves, r) for r in range(target.active)})
        return kept

    def _per_sample_loss(self, logits: Tensor, y: Tensor) -> Tensor:
        if self._default_loss:
            return F.cross_entropy(logits.float(), y, reduction="none")
        # A custom ClientModule.loss is assumed to be a mean of per-sample terms (as the default).
        return vmap(lambda out, target: self.model.loss(out.unsqueeze(0), target.unsqueeze(0)))(logits, y).float()

    def _write_rows(self, weights: Tensor, rows: Tensor, full: dict[str, Tensor], start: Tensor | None) -> None:
        """Copy a chunk's parameters into ``weights[rows]`` entry by entry (no ``(C, d)`` temporary);
        float buffers (never trained here) keep their start value: ``w^t``'s, or each client's start row."""
        state = self.model.state_dict() if self._constant and start is None else {}
        for entry in self.layout.float_entries:
            if entry.name in full:
                source = full[entry.name]
            elif start is not None:
                source = start[:, entry.start : entry.stop]
            else:
                source = state[entry.name].unsqueeze(0)
            weights[rows, entry.start : entry.stop] = source.reshape(source.shape[0], -1).to(weights.dtype)


class _StackedClients(StepTarget):
    """A chunk's local step on stacked parameters; hooks see all ``C`` rows, finished rows constant.

    ``full`` holds every client's parameters ``(C, *shape)``; the optimizer's ``leaves`` are views of
    the prefix of clients still training (``active`` rows, see the module docstring).
    """

    def __init__(self, engine: VectorizedEngine, full: dict[str, Tensor], leaves: list[Tensor],
                 batches: StagedBatches) -> None:
        self.engine, self.full, self.batches = engine, full, batches
        self.fused = isinstance(engine.forward, FusedLinearChain)
        self.autocast = _AUTOCAST.get(engine.plan.precision)
        self.step = 0
        self.stats_buffer = None
        self.narrow(leaves)

    def narrow(self, leaves: list[Tensor]) -> None:
        """Train ``leaves`` (views of the first rows of ``full``) from now on."""
        self.leaves = leaves
        self.named = dict(zip(self.full, leaves))
        self.active = len(leaves[0])
        self.engine.forward.bind(self.named)

    def _hook_params(self) -> dict[str, Tensor]:
        """``(C, ...)`` parameters in autograd for ``local_loss_term``: live rows, then finished rows (constant)."""
        if self.active == next(iter(self.full.values())).shape[0]:
            return self.named
        return {n: torch.cat([leaf, self.full[n][self.active:]]) for n, leaf in self.named.items()}

    @override
    def gradients(self, loss_term: LossTerm | None, scaler: torch.amp.GradScaler | None) -> Tensor:
        x, y, weight, offset = self.batches.get(self.step)
        engine, active = self.engine, self.active
        if self.fused:
            # Logits go straight into the statistics buffer (offset has their shape; dtype: the params').
            out = self.stats_buffer(offset.to(self.leaves[0].dtype)) if self.stats_buffer is not None else None
            for leaf in self.leaves:  # last step's gradients go before this step's exist (peak memory)
                leaf.grad = None
            grads, logits = engine.forward.gradients(x, weight, offset, out)
            if loss_term is not None:
                self._add_term_gradients(grads, loss_term)
            for name, leaf in self.named.items():
                leaf.grad = grads.get(name) if leaf.requires_grad else None
            return logits
        device = engine.model.device
        with torch.autocast(device.type, dtype=self.autocast, enabled=self.autocast is not None):
            logits = engine.forward(x)
        total = (engine._per_sample_loss(logits, y) * weight.squeeze(1)).sum()
        if loss_term is not None:
            term = loss_term(self._hook_params())
            total = total if term is None else total + term[:active].sum()
        for leaf in self.leaves:
            leaf.grad = None
        (scaler.scale(total) if scaler else total).backward()
        return logits

    def _add_term_gradients(self, grads: dict[str, Tensor], loss_term: LossTerm) -> None:
        with torch.enable_grad():
            term = loss_term(self._hook_params())
            if term is None:
                return
            trainable = [(n, leaf) for n, leaf in self.named.items() if leaf.requires_grad]
            extra = torch.autograd.grad(term[: self.active].sum(), [leaf for _, leaf in trainable], allow_unused=True)
        for (name, _), value in zip(trainable, extra):
            if value is not None:
                grads[name] = value if name not in grads else grads[name] + value

    @override
    def correct_gradients(self, hook: Callable[[dict[str, Tensor], dict[str, Tensor]], None]) -> None:
        """The hook sees ``(C, ...)`` gradients (zeros for finished clients); the active rows are kept."""
        full, active = self.full, self.active
        grads = {}
        for name, leaf in self.named.items():
            if leaf.grad is None:
                continue
            grad = leaf.grad
            if active < full[name].shape[0]:
                grad = torch.cat([grad, grad.new_zeros(full[name].shape[0] - active, *grad.shape[1:])])
            grads[name] = grad
        hook(full, grads)
        for name, grad in grads.items():
            self.named[name].grad = grad[:active]

    @override
    def snapshot(self) -> dict[str, Tensor]:
        return {n: t.clone() for n, t in self.full.items()}

    @override
    def after_step(self, hook: Callable[[dict[str, Tensor], dict[str, Tensor]], None],
                   before: dict[str, Tensor]) -> None:
        """``step_delta = w_after - w_before``; finished clients are restored whatever the hook wrote."""
        full, active = self.full, self.active
        with torch.no_grad():
            hook(full, {n: full[n] - before[n] for n in full})
            for name, value in full.items():
                if active < value.shape[0]:
                    value[active:].copy_(before[name][active:])


def _merge_extras(parts: list[tuple[Tensor, dict[str, Tensor]]], num_clients: int) -> dict[str, Tensor]:
    """Stack per-chunk hook statistics back into cohort order."""
    merged: dict[str, Tensor] = {}
    for index, extra in parts:
        for key, value in extra.items():
            if key not in merged:
                merged[key] = value.new_empty((num_clients, *value.shape[1:]))
            merged[key][index.to(value.device)] = value
    return merged
