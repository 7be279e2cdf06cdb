"""The vectorized engine's :class:`~lightning_fl.engines.local_step.StepTarget`: a chunk of stacked clients.

One local step of every client of a chunk still training (a prefix, see
:mod:`lightning_fl.engines.vectorized`): gradients from the cohort formulation (hand-written or
autograd), the hooks' loss terms on ``(C, ...)`` parameters, and the hooks' views of gradients and
step deltas with finished clients' rows kept constant.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import torch
from torch import Tensor
from typing_extensions import override

from lightning_fl.engines.batched import CohortForward
from lightning_fl.engines.fused import FusedLinearChain
from lightning_fl.engines.local_step import LossTerm, StepTarget, backward_with_term
from lightning_fl.engines.staging import StagedBatches

_AUTOCAST = {"bf16-mixed": torch.bfloat16, "bf16": torch.bfloat16, "16-mixed": torch.float16, "16": torch.float16}


class StackedClients(StepTarget):
    """A chunk's local step on stacked parameters; hooks see all ``C`` rows, finished rows constant.

    Args:
        forward: The engine's cohort formulation.
        per_sample_loss: ``(logits, y) -> (rows,)`` losses (autograd formulations).
        precision: The Trainer's precision string (autocast for the autograd formulations).
        full: Every client's parameters ``(C, *shape)``.
        leaves: The optimizer's leaves: views of the prefix of ``full`` still training (``active`` rows,
            see :mod:`lightning_fl.engines.vectorized`).
        batches: The chunk's staged batches.
        running: BatchNorm running statistics ``(C, F)``, bound with the leaves (the same prefix) and
            updated in place by the forward.
    """

    def __init__(self, forward: CohortForward, per_sample_loss: Callable[[Tensor, Tensor], Tensor], precision: str,
                 full: dict[str, Tensor], leaves: list[Tensor], batches: StagedBatches,
                 running: dict[str, Tensor] | None = None) -> None:
        self.forward, self.per_sample_loss = forward, per_sample_loss
        self.full, self.batches, self.running = full, batches, running or {}
        self.fused = isinstance(forward, FusedLinearChain)
        self.autocast = _AUTOCAST.get(precision)
        self.step = 0
        self.stats_buffer = None
        self._padded: dict[str, Tensor] = {}  # correct_gradients' (C, ...) gradients once clients finished
        self.narrow(leaves)

    def narrow(self, leaves: list[Tensor]) -> None:
        """Train ``leaves`` (views of the first rows of ``full``) from now on."""
        self.leaves = leaves
        self.named = dict(zip(self.full, leaves))
        self.active = len(leaves[0])
        self._bind(self.named)

    def _bind(self, named: dict[str, Tensor]) -> None:
        if self.running:
            self.forward.bind({**named, **{n: s[: self.active] for n, s in self.running.items()}})
        else:
            self.forward.bind(named)

    def _hook_params(self) -> dict[str, Tensor]:
        """``(C, ...)`` parameters in autograd for ``local_loss_term``: live rows, then finished rows (constant)."""
        if self.active == next(iter(self.full.values())).shape[0]:
            return self.named
        return {n: torch.cat([leaf, self.full[n][self.active:]]) for n, leaf in self.named.items()}

    @override
    def gradients(self, loss_term: LossTerm | None, scaler: torch.amp.GradScaler | None) -> Tensor:
        forward, active = self.forward, self.active
        if self.fused:
            x, weight, offset = self.batches.fused_inputs(self.step)
            # Logits go straight into the statistics buffer (offset has their shape; dtype: the params').
            out = self.stats_buffer(offset.to(self.leaves[0].dtype)) if self.stats_buffer is not None else None
            for leaf in self.leaves:  # last step's gradients go before this step's exist (peak memory)
                leaf.grad = None
            grads, logits = forward.gradients(x, weight, offset, out)
            if loss_term is not None:
                self._add_term_gradients(grads, loss_term)
            for name, leaf in self.named.items():
                leaf.grad = grads.get(name) if leaf.requires_grad else None
            return logits
        x, y, weight, offset = self.batches.get(self.step)
        device = x.device
        if self.running:  # batch statistics of the real samples only (padding rows have weight 0)
            forward.sample_mask = self.batches.real[self.step]
        with torch.autocast(device.type, dtype=self.autocast, enabled=self.autocast is not None):
            logits = forward(x)
        total = (self.per_sample_loss(logits, y) * weight.squeeze(1)).sum()
        backward_with_term(total, loss_term, self._hook_params, active, self.leaves, scaler)
        return logits

    def plain_sgd_steps(self, steps: range, lr: float, keep: Sequence[bool],
                        logits_buffer: Callable[[int, Tensor], Tensor]) -> None:
        """Steps ``steps`` (the same clients training) of the single-Linear hand-written path under plain SGD,
        in one loop (:meth:`~lightning_fl.engines.fused.FusedLinearChain.sgd_steps`): for a step with no
        hook, scaler or rate schedule, what :meth:`gradients` and the SGD step give, to float rounding."""
        for leaf in self.leaves:
            leaf.grad = None
        self.forward.sgd_steps(steps, self.batches.by_client, self.named, lr, keep, logits_buffer)
        self.step = steps[-1]

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
    def current(self) -> dict[str, Tensor]:
        return {n: t.detach() for n, t in self.full.items()}

    @override
    def gradients_at(self, point: dict[str, Tensor]) -> dict[str, Tensor]:
        """The step's batch through the formulation bound to ``point``'s active rows, then the live leaves again.

        The objective is the main step's, ``sum_c sum_b weight * loss``: each client's mean over its
        real samples, so a client's gradient is its own.
        """
        x, y, weight, offset = self.batches.get(self.step)
        active, forward = self.active, self.forward
        leaves = {n: value[:active].detach().requires_grad_(not self.fused) for n, value in point.items()}
        self._bind({**self.named, **leaves})
        try:
            if self.fused:  # hand-written gradients of the bound parameters (the engine runs under no_grad)
                grads, _ = forward.gradients(x, weight, offset)
                grads = {n: grads[n] for n in leaves}
            else:
                if self.running:
                    forward.sample_mask = self.batches.real[self.step]
                with torch.enable_grad():
                    with torch.autocast(x.device.type, dtype=self.autocast, enabled=self.autocast is not None):
                        logits = forward(x)
                    total = (self.per_sample_loss(logits, y) * weight.squeeze(1)).sum()
                    values = torch.autograd.grad(total, list(leaves.values()), allow_unused=True)
                grads = {n: torch.zeros_like(leaf) if g is None else g for (n, leaf), g in zip(leaves.items(), values)}
        finally:
            self._bind(self.named)
        rows = next(iter(self.full.values())).shape[0]
        return {n: g if active == rows else torch.cat([g, g.new_zeros(rows - active, *g.shape[1:])])
                for n, g in grads.items()}

    @override
    def correct_gradients(self, hook: Callable[[dict[str, Tensor], dict[str, Tensor]], None],
                          active_rows_only: bool = False) -> None:
        """The hook sees ``(C, ...)`` gradients (zeros for finished clients); the active rows are kept.

        A row-wise hook (``active_rows_only``) sees the active rows alone: nothing to pad or compute for the rest.
        """
        full, active = self.full, self.active
        if active_rows_only:
            hook({n: full[n][:active] for n in self.named},
                 {n: leaf.grad for n, leaf in self.named.items() if leaf.grad is not None})
            return
        grads = {}
        for name, leaf in self.named.items():
            if leaf.grad is None:
                continue
            grad = leaf.grad
            if active < full[name].shape[0]:
                # One (C, ...) buffer per parameter for the whole pass: a new padded tensor every step cost
                # more than the step itself (allocation and page faults), for every gradient-correcting hook.
                padded = self._padded.get(name)
                if padded is None or padded.shape != full[name].shape or padded.dtype != grad.dtype:
                    padded = self._padded[name] = grad.new_empty(full[name].shape)
                padded[:active].copy_(grad)
                padded[active:].zero_()
                grad = padded
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
