"""Per-step data of a chunk, staged once per round, and final-epoch statistics computed once.

On a CPU a cohort step of a small model costs a few microseconds per tensor op, so everything that
does not depend on the parameters is taken out of the step loop (profile in docs/performance.md):

* :class:`StagedBatches` gathers every step's inputs and labels with one ``index_select`` per round
  (within a memory budget; otherwise inputs per step) from the packed schedule, and for the
  hand-written cross-entropy gradient precomputes ``-w * onehot(y)``, the label part of
  ``w * (softmax(z) - onehot(y))``.
* :class:`FinalEpochStats` keeps the logits of final-epoch steps and computes ``train_acc`` and
  ``train_loss`` (docs/algorithms.md, Notation) for the whole chunk in one pass after training.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from lightning_fl.engines.schedule import ChunkSchedule

STAGING_BUDGET_BYTES = 64 * 2**20


def per_sample_cross_entropy(logits: Tensor, target: Tensor) -> Tensor:
    """``F.cross_entropy(logits.float(), target, reduction="none")`` as a few plain ops.

    Equal to float rounding; on CPU ``log_softmax`` over few classes is several times slower.
    """
    z = logits.float()
    top = z.amax(1, keepdim=True)
    lse = (z - top).exp_().sum(1).log_().add_(top.squeeze(1))
    return lse - z.gather(1, target.unsqueeze(1)).squeeze(1)


class StagedBatches:
    """Inputs, labels and loss weights of every local step of a chunk (packed rows, see schedule).

    Args:
        schedule: The chunk's packed batch tables.
        x_train: All clients' training inputs.
        y_train: Their labels.
        num_classes: When given (hand-written cross-entropy), also stage ``-w * onehot(y)``.
        budget_bytes: Most bytes of inputs (and of one-hot offsets) staged at once; above it they are
            made per step.
    """

    def __init__(self, schedule: ChunkSchedule, x_train: Tensor, y_train: Tensor, num_classes: int | None = None,
                 budget_bytes: int = STAGING_BUDGET_BYTES) -> None:
        index = schedule.index
        self._x_train, self._schedule = x_train, schedule
        # Column-shaped (rows, 1): the per-sample weight multiplies a row of logit gradients.
        self._weight_rows = schedule.weight.unsqueeze(1)
        self.labels = y_train.index_select(0, index)
        self._x_rows: Tensor | None = None
        if len(index) * x_train[:1].numel() * x_train.element_size() <= budget_bytes:
            self._x_rows = x_train.index_select(0, index)
        self.num_classes = num_classes
        self._offset_rows: Tensor | None = None
        if num_classes is not None and len(index) * num_classes * 4 <= budget_bytes:
            onehot = F.one_hot(self.labels, num_classes).to(schedule.weight.dtype)
            self._offset_rows = onehot * -self._weight_rows

    # One view per step of each table, made when first asked for: a split into a J1 round's thousand-odd
    # steps costs about a millisecond, and each path reads only some of the tables by step.
    @functools.cached_property
    def x(self) -> tuple[Tensor, ...] | None:
        """Each step's inputs, or ``None`` when they were over the budget (then gathered per step)."""
        return None if self._x_rows is None else self._x_rows.split(self._schedule.widths)

    @functools.cached_property
    def weight(self) -> tuple[Tensor, ...]:
        """Each step's ``(rows, 1)`` loss weights."""
        return self._weight_rows.split(self._schedule.widths)

    @functools.cached_property
    def offset(self) -> tuple[Tensor, ...] | None:
        """Each step's ``-w * onehot(y)``, or ``None`` (no ``num_classes``, or over the budget: made per step)."""
        return None if self._offset_rows is None else self._offset_rows.split(self._schedule.widths)

    @functools.cached_property
    def y(self) -> tuple[Tensor, ...]:
        """Each step's labels."""
        return self.labels.split(self._schedule.widths)

    @functools.cached_property
    def real(self) -> tuple[Tensor, ...]:
        """Each step's rows BatchNorm's batch statistics use: 1, in the weights' dtype (no cast per layer and step)."""
        weight = self._schedule.weight
        return (weight > 0).to(weight.dtype).split(self._schedule.widths)

    @functools.cached_property
    def _index(self) -> tuple[Tensor, ...]:
        return self._schedule.index.split(self._schedule.widths)

    @functools.cached_property
    def by_client(self) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...], tuple[Tensor, ...]] | None:
        """Each step's ``(inputs (C, B, features), weights (C, B, 1), offsets (C, B, classes))``, ``C`` the
        clients still training, or ``None`` when inputs or offsets were not staged.

        The same memory as :meth:`fused_inputs` gives, viewed per client (a step's ``active * B`` rows are
        its clients' batches in order), so a single Linear's step needs no reshaping.
        """
        if self._x_rows is None or self._offset_rows is None:
            return None
        active, rows = self._schedule.active, len(self._x_rows)
        batch = rows // sum(active)
        x = self._x_rows.reshape(rows // batch, batch, -1).split(active)
        weight = self._weight_rows.view(rows // batch, batch, 1).split(active)
        offset = self._offset_rows.view(rows // batch, batch, -1).split(active)
        return x, weight, offset

    def fused_inputs(self, step: int) -> tuple[Tensor, Tensor, Tensor]:
        """``(x, weight (rows, 1), offset)`` of ``step`` for the hand-written cross-entropy (``num_classes`` given)."""
        x = self.x[step] if self.x is not None else self._x_train.index_select(0, self._index[step])
        weight = self.weight[step]
        offset = self.offset[step] if self.offset is not None else None
        if offset is None:
            offset = F.one_hot(self.y[step], self.num_classes).to(weight.dtype) * -weight
        return x, weight, offset

    def get(self, step: int) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """``(x, y, weight (rows, 1), offset)`` of ``step``: the rows of the clients still training."""
        if self.num_classes is not None:
            x, weight, offset = self.fused_inputs(step)
            return x, self.y[step], weight, offset
        x = self.x[step] if self.x is not None else self._x_train.index_select(0, self._index[step])
        return x, self.y[step], self.weight[step], None


class FinalEpochStats:
    """Logits of final-epoch steps; per-client correct counts and loss sums computed after training.

    Args:
        schedule: The chunk's packed batch tables (``has_final`` says which steps to keep).
        batches: The staged labels.
    """

    def __init__(self, schedule: ChunkSchedule, batches: StagedBatches) -> None:
        self.wants = schedule.has_final
        self.steps = [s for s, keep in enumerate(schedule.has_final) if keep]
        self._schedule, self._batches = schedule, batches
        self._views: dict[int, Tensor] = {}
        self._buffer: Tensor | None = None

    def buffer(self, step: int, like: Tensor) -> Tensor:
        """Where step ``step``'s logits go: ``(rows, *like.shape[1:])`` of ``like``'s dtype."""
        if self._buffer is None:
            widths = [self._schedule.widths[s] for s in self.steps]
            self._buffer = like.new_empty(sum(widths), *like.shape[1:])
            self._views = dict(zip(self.steps, self._buffer.split(widths)))
        return self._views[step]

    def record(self, step: int, logits: Tensor) -> None:
        """Keep the logits of a final-epoch step (unless they were written to :meth:`buffer`)."""
        view = self.buffer(step, logits.detach())
        if view.data_ptr() != logits.data_ptr():
            view.copy_(logits.detach())

    def totals(self, per_sample_loss: Callable[[Tensor, Tensor], Tensor], num_clients: int) -> tuple[Tensor, Tensor]:
        """``(correct, loss_sum)``: ``(C,)`` float64 CPU sums over each client's final-epoch samples."""
        if self._buffer is None:
            zeros = torch.zeros(num_clients, dtype=torch.float64)
            return zeros, zeros.clone()
        widths = self._schedule.widths
        if len(self.steps) == len(widths):
            final, labels, client = self._schedule.final, self._batches.labels, self._schedule.client
        else:  # the rows of the final-epoch steps only, in step order (a mask: no view per step)
            device = self._schedule.final.device
            keep = torch.tensor(self.wants, device=device).repeat_interleave(torch.tensor(widths, device=device))
            final, labels, client = (t[keep] for t in (self._schedule.final, self._batches.labels, self._schedule.client))
        hits = (self._buffer.argmax(-1) == labels).to(final.dtype) * final
        losses = per_sample_loss(self._buffer, labels).to(final.dtype) * final
        correct = hits.new_zeros(num_clients).index_add_(0, client, hits)
        loss_sum = losses.new_zeros(num_clients).index_add_(0, client, losses)
        return correct.double().cpu(), loss_sum.double().cpu()
