"""The one local-step routine that every client engine runs, with the client hooks in their order.

A local step of the clients in a :class:`~lightning_fl.engines.cohort.LocalTrainingContext` is, in
this order (the round of docs/architecture.md, with the client hooks of :class:`~lightning_fl.engines.hooks.ClientHooks`):

1. gradients of the data loss plus ``local_loss_term`` (e.g. FedProx's proximal term);
2. ``extra_gradient_point`` / ``on_extra_gradient``: the data loss's gradient on the same minibatch at
   other parameters (e.g. APFL's mixture ``vbar``), from the pre-step parameters;
3. under ``16-mixed``, unscale the gradients if a hook will read them;
4. ``correct_local_gradients`` (e.g. SCAFFOLD's ``g - c_k + c``);
5. the client optimizer's step;
6. ``after_local_step`` with the step just taken (e.g. IGFL's group correction).

Engines differ only in *what* is stepped, a :class:`StepTarget`: one client's working module in the
sequential engine, a chunk of stacked clients in the vectorized one. A new client-side hook is added
here, once, for both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from lightning_fl.engines.cohort import LocalTrainingContext
from lightning_fl.engines.hooks import ClientHookSet
from lightning_fl.engines.optimizers import step_function

#: ``params (C, ...) -> (C,)`` extra loss per client, or ``None`` (the summed ``local_loss_term`` hooks).
LossTerm = Callable[[dict[str, Tensor]], Tensor | None]


def backward_with_term(total: Tensor, loss_term: LossTerm | None, hook_params: Callable[[], dict[str, Tensor]],
                       active: int, leaves: list[Tensor], scaler: torch.amp.GradScaler | None) -> None:
    """Backward of the cohort's data loss ``total`` plus the hooks' term of the ``active`` clients still training.

    The stacked engines' common tail of a step: the term sees every client's ``(C, ...)`` parameters
    (``hook_params()``), only the live rows count, and last step's gradients go before this step's exist.
    """
    if loss_term is not None:
        term = loss_term(hook_params())
        total = total if term is None else total + term[:active].sum()
    for leaf in leaves:
        leaf.grad = None
    (scaler.scale(total) if scaler else total).backward()


class StepTarget(ABC):
    """The parameters a local step updates, as the engine holds them; hooks see ``(C, ...)`` tensors."""

    @abstractmethod
    def gradients(self, loss_term: LossTerm | None, scaler: torch.amp.GradScaler | None) -> Tensor:
        """Set the leaves' ``.grad`` from the step's data loss (+ ``loss_term``); return the logits (``None``
        for a plain LightningModule, whose ``training_step`` gives a loss only)."""

    @abstractmethod
    def current(self) -> dict[str, Tensor]:
        """The parameters now, as detached ``(C, *shape)`` views (every client row)."""

    @abstractmethod
    def gradients_at(self, point: dict[str, Tensor]) -> dict[str, Tensor]:
        """``(C, *shape)`` gradients of each client's mean data loss on this step's minibatch at ``point``.

        ``point`` maps trainable parameter names to ``(C, *shape)`` values (the others stay live); the
        leaves' ``.grad`` and the parameters are left as they were; finished clients' rows are zeros.
        """

    @abstractmethod
    def correct_gradients(self, hook: Callable[[dict[str, Tensor], dict[str, Tensor]], None],
                          active_rows_only: bool = False) -> None:
        """Run ``hook(params, grads)`` on ``(C, ...)`` views and keep what it wrote into ``grads``.

        ``active_rows_only``: the hook is row-wise (``ClientHooks.row_wise_correction``), so the views
        may hold only the rows of the clients still training.
        """

    @abstractmethod
    def snapshot(self) -> Any:
        """The parameters before the optimizer step (for ``after_local_step``)."""

    @abstractmethod
    def after_step(self, hook: Callable[[dict[str, Tensor], dict[str, Tensor]], None], before: Any) -> None:
        """Run ``hook(params, step_delta)`` on ``(C, ...)`` views after the optimizer step."""


class LocalStep:
    """Takes local steps of one engine's :class:`StepTarget` in the order of the module docstring.

    Args:
        hooks: The run's client hooks.
        optimizer: The client optimizer over the target's leaves.
        scaler: The ``16-mixed`` gradient scaler, or ``None``.
        step_lr: The learning rate of each local step (a per-step schedule), or ``None``.
    """

    def __init__(self, hooks: ClientHookSet, optimizer: Optimizer, scaler: torch.amp.GradScaler | None,
                 step_lr: Callable[[int], float] | None = None) -> None:
        self.hooks, self.optimizer, self.scaler, self.step_lr = hooks, optimizer, scaler, step_lr
        self.use_term = hooks.has("local_loss_term")
        self.use_fix = hooks.has("correct_local_gradients")
        self.use_after = hooks.has("after_local_step")
        self.use_extra = hooks.has("extra_gradient_point")
        self._step = step_function(optimizer)  # optimizer.step minus torch's per-call profiler range

    @property
    def bare(self) -> bool:
        """No hook acts during a step, no scaler and no per-step rate: a step is gradients, then the update."""
        return not (self.use_term or self.use_fix or self.use_after or self.use_extra
                    or self.scaler is not None or self.step_lr is not None)

    def __call__(self, ctx: LocalTrainingContext, target: StepTarget, step_idx: int) -> Tensor:
        """Local step ``step_idx`` of the clients in ``ctx``; returns the logits of its batch (or ``None``)."""
        hooks, scaler = self.hooks, self.scaler
        ctx.step = step_idx
        lr = self.step_lr(step_idx) if self.step_lr is not None else None
        ctx.step_lr = ctx.lr if lr is None else lr
        term = (lambda params: hooks.local_loss_term(ctx, params)) if self.use_term else None
        logits = target.gradients(term, scaler)
        if self.use_extra:  # after the main gradients, so the main forward draws what it always draws
            hooks.extra_gradients(ctx, target.current(), target.gradients_at)
        if scaler is not None and (self.use_fix or self.use_after):
            scaler.unscale_(self.optimizer)  # hooks read and write true gradients, not scaled ones
        if self.use_fix:
            target.correct_gradients(lambda params, grads: hooks.correct_local_gradients(ctx, params, grads),
                                     hooks.row_wise_correction)
        before = target.snapshot() if self.use_after else None
        if lr is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        if scaler is not None:
            scaler.step(self.optimizer)
            scaler.update()
        else:
            self._step()
        if self.use_after:
            target.after_step(lambda params, delta: hooks.after_local_step(ctx, params, delta), before)
        return logits
