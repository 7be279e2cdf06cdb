"""The sequential client engine: one reusable working module trains the cohort's clients in turn."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import Tensor
from torch.func import functional_call
from typing_extensions import override

from lightning_fl.engines.base import ClientEngine, epoch_permutation, output_rows
from lightning_fl.engines.cohort import LocalTrainingContext
from lightning_fl.engines.hooks import ClientHookSet
from lightning_fl.engines.local_step import LocalStep, LossTerm, StepTarget
from lightning_fl.engines.optimizers import load_state
from lightning_fl.models.base import ClientModule
from lightning_fl.models.user_module import is_user_module, quiet_logging, step_loss, training_step_at
from lightning_fl.state.client_state import ClientStateStore
from lightning_fl.state.data import ClientData, FederatedData
from lightning_fl.state.seeding import derive_seed


class SequentialEngine(ClientEngine):
    """Trains clients one after another with plain PyTorch steps on a reused copy of the model.

    No ``Trainer``, ``DataLoader`` or module is created per client: the working copy is reset to
    ``w^t`` with in-place copies, batches are index slices of on-device tensors, and only the client
    optimizer is rebuilt (fresh state each round unless ``keep_optimizer_state``). Client hooks see
    tensors with a leading dimension of 1.

    A plain LightningModule (:mod:`lightning_fl.models.user_module`) is stepped through its own
    ``training_step((x, y), step)``; it gives no logits, so its ``train_acc`` is NaN and ``train_loss`` is
    the mean of the returned losses over the final epoch's samples.
    """

    name = "sequential"

    @override
    def setup(self, model: ClientModule, data: FederatedData, store: ClientStateStore,
              source: ClientData | None = None) -> None:
        super().setup(model, data, store, source)
        self.work = copy.deepcopy(model)
        self.work.train()
        self._work_state = self.work.state_dict()
        self._named = list(self.work.named_parameters())

    @override
    def _train(self, ctx: LocalTrainingContext, hooks: ClientHookSet
               ) -> tuple[Tensor, dict[str, Tensor], Tensor, Tensor, dict[str, Tensor]]:
        num_clients = ctx.num_clients
        weights = output_rows(ctx.start_rows, num_clients, self.layout.numel, self.model.device)
        train_acc = torch.zeros(num_clients, dtype=torch.float64)
        train_loss = torch.zeros(num_clients, dtype=torch.float64)
        extras: list[dict[str, Tensor]] = []
        int_state: dict[str, Tensor] = {}
        global_state = self.model.state_dict()
        with quiet_logging(self.work):
            for i, client_id in enumerate(ctx.client_ids.tolist()):
                extras.append(self._train_one(ctx, i, client_id, global_state, hooks, weights, train_acc, train_loss))
                if i == 0:
                    int_state = {n: self._work_state[n].clone() for n in self.layout.other_names}
        stacked = {key: torch.cat([e[key] for e in extras]) for key in extras[0]} if extras else {}
        return weights, int_state, train_acc, train_loss, stacked

    def _train_one(self, ctx: LocalTrainingContext, i: int, client_id: int, global_state: dict[str, Tensor],
                   hooks: ClientHookSet, weights: Tensor, train_acc: Tensor, train_loss: Tensor) -> dict[str, Tensor]:
        """Cohort member ``i`` from ``w^t`` (or its start row) into ``weights[i]``; returns its hooks' extras."""
        one = LocalTrainingContext(
            round_idx=ctx.round_idx, client_ids=ctx.client_ids[i : i + 1], cohort_size=ctx.cohort_size,
            num_steps=ctx.num_steps[i : i + 1], global_params=ctx.global_params, lr=ctx.lr,
            sub_round=ctx.sub_round, layout=ctx.layout, frozen=ctx.frozen, stream=ctx.stream,
            batch_repeats=ctx.batch_repeats,
        )
        with torch.no_grad():
            for name, value in global_state.items():
                self._work_state[name].copy_(value)
            if ctx.start_rows is not None:  # a personal model (integer buffers stay w^t's)
                self.layout.load_into(ctx.start_rows[i], self._work_state)
        # Dropout and other draws of torch's global generator: a function of (seed, round, client),
        # so a client trains the same whichever process or position in the cohort it has.
        torch.manual_seed(derive_seed(self.plan.seed, "client-torch", ctx.round_idx, ctx.sub_round, client_id,
                                      *((ctx.stream,) if ctx.stream != "train" else ())))
        train_acc[i], train_loss[i], extra = self._train_client(one, client_id, hooks)
        self.layout.flatten(self._work_state, out=weights[i])
        return extra

    def _train_client(self, ctx: LocalTrainingContext, client_id: int, hooks: ClientHookSet
                      ) -> tuple[float, float, dict[str, Tensor]]:
        plan = self.plan
        x_all, y_all = self.data.client_train(int(self.rows(torch.tensor([client_id]))[0]))
        num_samples = len(y_all)
        optimizer = plan.optimizer_factory([p for _, p in self._named])
        saved = self.store.optimizer_state(client_id)
        if saved is not None:
            load_state(optimizer, saved, plan.lr)
        local_step = LocalStep(hooks, optimizer, self._make_scaler(), self.plan.step_lr)
        target = _WorkingModule(self.work, self._named, ctx.frozen)
        hooks.on_local_train_start(ctx)
        correct = torch.zeros((), device=y_all.device)
        loss_sum = torch.zeros((), device=y_all.device)
        budget = int(ctx.num_steps[0])  # tau_k, or fewer for a straggler's partial work
        repeats = ctx.batch_repeats
        per_epoch = self._num_batches(num_samples, plan.batch_size)
        # Statistics cover the minibatches of this (possibly incomplete) epoch, each at its first repeat.
        last_epoch = (-(-budget // repeats) - 1) // per_epoch
        seen_in_last = 0
        step_idx = 0
        for epoch in range(last_epoch + 1):
            order = epoch_permutation(plan.seed, ctx.round_idx, client_id, epoch, num_samples, ctx.sub_round,
                                      ctx.stream)
            order = order.to(y_all.device)
            final_epoch = epoch == last_epoch
            for start in range(0, num_samples, plan.batch_size):
                if step_idx == budget:
                    break
                index = order[start : start + plan.batch_size]
                target.x, target.y = x_all.index_select(0, index), y_all.index_select(0, index)
                for repeat in range(min(repeats, budget - step_idx)):
                    target.step_idx = step_idx
                    logits = local_step(ctx, target, step_idx)
                    if final_epoch and repeat == 0:
                        seen_in_last += len(index)
                        with torch.no_grad():
                            if logits is None:  # a plain LightningModule: a loss, no predictions
                                correct = correct + float("nan")
                            else:
                                correct += (logits.argmax(1) == target.y).sum()
                            loss_sum += target.loss.detach().float() * len(target.y)
                    step_idx += 1
        self.store.save_optimizer_state(client_id, optimizer.state_dict())
        extra = hooks.on_local_train_end(ctx, target.stacked())
        return float(correct) / seen_in_last, float(loss_sum) / seen_in_last, extra


class _WorkingModule(StepTarget):
    """One client's local step on the reused working module; hooks see ``(1, *shape)`` views."""

    def __init__(self, work: ClientModule, named: list[tuple[str, torch.nn.Parameter]],
                 frozen: frozenset[str] = frozenset()) -> None:
        self.work, self.named = work, named
        self.params = [p for _, p in named]
        self.frozen = [p for n, p in named if n in frozen]
        self.x: Tensor | None = None
        self.y: Tensor | None = None
        self.loss: Tensor | None = None
        self.step_idx = 0
        self.user = is_user_module(work)

    def stacked(self) -> dict[str, Tensor]:
        """Detached ``(1, *shape)`` views of the working parameters (in-place edits reach the model)."""
        return {n: p.detach().unsqueeze(0) for n, p in self.named}

    @override
    def gradients(self, loss_term: LossTerm | None, scaler: torch.amp.GradScaler | None) -> Tensor | None:
        if self.user:  # the module's own objective: what its training_step returns
            logits, self.loss = None, step_loss(self.work.training_step((self.x, self.y), self.step_idx))
        else:
            logits = self.work(self.x)
            self.loss = self.work.loss(logits, self.y)
        total = self.loss
        if loss_term is not None:
            term = loss_term({n: p.unsqueeze(0) for n, p in self.named})
            total = total if term is None else total + term.sum()
        for p in self.params:  # zero_grad(set_to_none=True) without its profiler range
            p.grad = None
        (scaler.scale(total) if scaler else total).backward()
        for p in self.frozen:  # no gradient: the optimizer skips them (no weight decay, no momentum)
            p.grad = None
        return logits

    @override
    def current(self) -> dict[str, Tensor]:
        return self.stacked()

    @override
    def gradients_at(self, point: dict[str, Tensor]) -> dict[str, Tensor]:
        """The working module run functionally at ``point`` (fresh leaves: ``.grad`` stays the step's)."""
        leaves = {n: value[0].detach().requires_grad_() for n, value in point.items()}
        state = {**dict(self.work.named_buffers()), **{n: p.detach() for n, p in self.named}, **leaves}
        with torch.enable_grad():
            if self.user:
                loss = training_step_at(self.work, state, (self.x, self.y), self.step_idx)
            else:
                loss = self.work.loss(functional_call(self.work, state, (self.x,)), self.y)
            grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
        return {n: (torch.zeros_like(leaf) if g is None else g).unsqueeze(0)
                for (n, leaf), g in zip(leaves.items(), grads)}

    @override
    def correct_gradients(self, hook: Callable[[dict[str, Tensor], dict[str, Tensor]], None],
                          active_rows_only: bool = False) -> None:
        hook(self.stacked(), {n: p.grad.unsqueeze(0) for n, p in self.named if p.grad is not None})

    @override
    def snapshot(self) -> list[Tensor]:
        return [p.detach().clone() for p in self.params]

    @override
    def after_step(self, hook: Callable[[dict[str, Tensor], dict[str, Tensor]], None], before: list[Tensor]) -> None:
        with torch.no_grad():
            hook(self.stacked(), {n: (p - b).unsqueeze(0) for (n, p), b in zip(self.named, before)})
