"""A plain LightningModule's ``training_step`` over a chunk of stacked clients (the vectorized engine).

Each client's loss is the module's own ``training_step((x_c, y_c), step)`` run with its row of the
stacked parameters (``torch.func.functional_call`` under ``vmap``); the step's objective is the sum
of the clients' losses, whose gradient with respect to row ``c`` is client ``c``'s own gradient.

Padding: the engine lays out ``B`` rows per client and step, and a client's last minibatch of an epoch
has fewer real samples. A ``training_step`` averages over the batch it is given, so it must see the
real samples only: clients are grouped by their real batch size at each step, and each group is one
``vmap`` over exactly its clients' real rows (usually one group: every client at a full batch).

Before a module is trained this way, :func:`user_step_problem` checks on a few samples that the
vmapped loss equals the module's own ``training_step`` loss; otherwise (data-dependent control flow,
in-place updates of buffers, random draws under ``vmap``, ...) the engine trains sequentially.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.func import vmap
from typing_extensions import override

from lightning_fl.engines.local_step import LossTerm, backward_with_term
from lightning_fl.engines.schedule import ChunkSchedule
from lightning_fl.engines.stacked import StackedClients
from lightning_fl.engines.staging import StagedBatches
from lightning_fl.models.user_module import quiet_logging, step_loss, training_step_at
from pytorch_lightning import LightningModule

__all__ = ["UserStackedClients", "UserStepForward", "user_step_problem"]


class UserStepForward:
    """Per-client ``training_step`` losses of the bound ``(C, *shape)`` parameters (the module's buffers shared).

    Args:
        module: The client module (its own parameters are not used, only its code and buffers).
    """

    kind = "training_step"

    def __init__(self, module: LightningModule) -> None:
        self.module = module
        self.params: dict[str, Tensor] = {}

    def bind(self, named: dict[str, Tensor]) -> None:
        """Compute with ``named`` ``(C, *shape)`` parameters from now on."""
        self.params = named

    def losses(self, x: Tensor, y: Tensor, sizes: list[int], step: int) -> Tensor:
        """``(C,)`` losses: client ``c`` on ``x[c, :sizes[c]]`` (``x``: ``(C, B, ...)``), grouped by size."""
        groups: dict[int, list[int]] = {}
        for row, size in enumerate(sizes):
            groups.setdefault(size, []).append(row)
        buffers = dict(self.module.named_buffers())

        def one(params: dict[str, Tensor], xb: Tensor, yb: Tensor) -> Tensor:
            return training_step_at(self.module, {**buffers, **params}, (xb, yb), step)

        if len(groups) == 1:
            size = sizes[0]
            return vmap(one)(self.params, x[:, :size], y[:, :size])
        parts, order = [], []
        for size, rows in groups.items():
            index = torch.tensor(rows, device=x.device)
            params = {n: p.index_select(0, index) for n, p in self.params.items()}
            parts.append(vmap(one)(params, x.index_select(0, index)[:, :size], y.index_select(0, index)[:, :size]))
            order += rows
        inverse = torch.empty(len(order), dtype=torch.long, device=x.device)
        inverse[torch.tensor(order, device=x.device)] = torch.arange(len(order), device=x.device)
        return torch.cat(parts).index_select(0, inverse)


class UserStackedClients(StackedClients):
    """:class:`~lightning_fl.engines.stacked.StackedClients` whose loss is the module's ``training_step``.

    ``gradients`` returns no logits; the final epoch's losses (times each client's real batch size) are
    summed into ``loss_sums`` instead (``train_loss``, as the sequential engine computes it).

    Args:
        forward: The chunk's :class:`UserStepForward`.
        schedule: The chunk's schedule (real and final-epoch rows).
        full: Every client's parameters ``(C, *shape)``.
        leaves: The optimizer's leaves (the active prefix of ``full``).
        batches: The chunk's staged batches.
        batch_size: ``B``, rows per client and step.
    """

    def __init__(self, forward: UserStepForward, schedule: ChunkSchedule, full: dict[str, Tensor],
                 leaves: list[Tensor], batches: StagedBatches, batch_size: int) -> None:
        super().__init__(forward, lambda logits, y: logits, "32-true", full, leaves, batches)
        self.batch_size = batch_size
        self._final = schedule.final.split(schedule.widths)
        self.loss_sums = torch.zeros(len(leaves[0]), dtype=torch.float64, device=leaves[0].device)

    def _losses(self) -> Tensor:
        x, y, _, _ = self.batches.get(self.step)
        active, batch = self.active, self.batch_size
        sizes = self.batches.real[self.step].view(active, batch).sum(1).long().tolist()
        return self.forward.losses(x.view(active, batch, *x.shape[1:]), y.view(active, batch, *y.shape[1:]), sizes,
                                   self.step)

    @override
    def gradients(self, loss_term: LossTerm | None, scaler: torch.amp.GradScaler | None) -> None:
        active = self.active
        losses = self._losses()
        with torch.no_grad():
            self.loss_sums[:active] += losses.detach().double() * self._final[self.step].view(active, -1).sum(1)
        backward_with_term(losses.sum(), loss_term, self._hook_params, active, self.leaves, scaler)
        return None

    @override
    def gradients_at(self, point: dict[str, Tensor]) -> dict[str, Tensor]:
        active = self.active
        leaves = {n: value[:active].detach().requires_grad_() for n, value in point.items()}
        self._bind({**self.named, **leaves})
        try:
            with torch.enable_grad():
                values = torch.autograd.grad(self._losses().sum(), list(leaves.values()), allow_unused=True)
        finally:
            self._bind(self.named)
        rows = next(iter(self.full.values())).shape[0]
        grads = {n: torch.zeros_like(leaf) if g is None else g for (n, leaf), g in zip(leaves.items(), values)}
        return {n: g if active == rows else torch.cat([g, g.new_zeros(rows - active, *g.shape[1:])])
                for n, g in grads.items()}


def user_step_problem(module: LightningModule, x: Tensor, y: Tensor) -> str | None:
    """Why ``training_step`` cannot run under ``vmap`` as the module runs it (``None``: it can).

    Two stacked copies of the module's parameters, each on ``(x, y)``, must give the module's own loss.
    """
    forward = UserStepForward(module)
    forward.bind({n: p.detach().unsqueeze(0).repeat(2, *[1] * p.dim()) for n, p in module.named_parameters()})
    was_training = module.training
    module.train()
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad(), quiet_logging(module):
            expected = step_loss(module.training_step((x, y), 0)).float()
            got = forward.losses(torch.stack([x, x]), torch.stack([y, y]), [len(y), len(y)], 0).float()
    except Exception as err:  # noqa: BLE001 - any failure under vmap means: train sequentially
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        return f"training_step under vmap failed: {type(err).__name__}: {first}"[:300]
    finally:
        module.train(was_training)
    if not torch.allclose(got, expected.expand(2), rtol=1e-4, atol=1e-6):
        return (f"training_step under vmap gives loss {got[0].item():.6g}, the module's own training_step"
                f" {expected.item():.6g}")
    return None
