"""Evaluation of one model on many clients' data in a few large batches."""

from __future__ import annotations

import copy

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from pytorch_lightning import LightningModule
from torch import Tensor
from torch.func import functional_call

from lightning_fl.models.base import ClientModule
from lightning_fl.models.user_module import is_user_module, quiet_logging, step_loss
from lightning_fl.state.data import FederatedData
from lightning_fl.state.flat_state import FlatStateLayout


class ChunkSharding(Protocol):
    """What evaluation needs of :class:`~lightning_fl.simulation.distributed.CohortSharding`."""

    active: bool
    rank: int
    world_size: int

    def gather_dict(self, local: dict[Any, Any], what: str) -> dict[Any, Any]: ...


@torch.no_grad()
def evaluate_segments(model: ClientModule, x: Tensor, y: Tensor, offsets: Tensor, batch_size: int = 4096,
                      sharding: ChunkSharding | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Per-client correct counts, sample counts and summed losses of ``model`` on concatenated data.

    The whole tensor is evaluated in chunks of ``batch_size`` regardless of client boundaries, then
    per-sample results are summed per client with ``index_add_``: one pass over the data whatever the
    number of clients. With ``sharding`` over ``W`` processes, rank ``r`` evaluates chunks ``r, r + W,
    ...`` and the per-sample results are gathered, so every rank sums exactly the same chunks in the same
    order as one process does (identical results for any ``W``).

    Args:
        model: The model to evaluate (switched to eval mode and back).
        x: Inputs of all clients, concatenated.
        y: Labels, aligned with ``x``.
        offsets: ``N + 1`` client offsets into ``x``.
        batch_size: Samples per forward pass.
        sharding: Splits the chunks over processes (``None``: this process evaluates all).

    Returns:
        ``(correct, total, loss_sum)``, each of shape ``(N,)`` in float64 on the CPU.
    """
    num_clients = len(offsets) - 1
    owner = torch.repeat_interleave(torch.arange(num_clients, device=y.device), offsets.diff().to(y.device))
    correct = torch.zeros(num_clients, dtype=torch.float64, device=y.device)
    loss_sum = torch.zeros_like(correct)
    starts = list(range(0, len(y), batch_size))
    sharded = sharding is not None and sharding.active
    mine = starts[sharding.rank :: sharding.world_size] if sharded else starts
    was_training = model.training
    model.eval()
    results: dict[int, tuple[Tensor, Tensor]] = {}
    for start in mine:
        xb, yb = x[start : start + batch_size], y[start : start + batch_size]
        logits = model(xb).float()
        results[start] = ((logits.argmax(1) == yb).double(),
                          torch.nn.functional.cross_entropy(logits, yb, reduction="none").double())
    model.train(was_training)
    if sharded:
        results = {start: (hit.to(y.device), loss.to(y.device))
                   for start, (hit, loss) in sharding.gather_dict(results, "evaluation").items()}
    for start in starts:
        hit, loss = results[start]
        ob = owner[start : start + batch_size]
        correct.index_add_(0, ob, hit)
        loss_sum.index_add_(0, ob, loss)
    return correct.cpu(), offsets.diff().double().cpu(), loss_sum.cpu()


def client_train_losses(model: LightningModule, data: FederatedData, client_ids: Tensor,
                        batch_size: int = 4096) -> Tensor:
    """Mean loss of ``model`` on each listed client's full train split (``loss_before_k``, docs/algorithms.md, Notation).

    The loss is the client's training objective: a ClientModule's ``loss(forward(x), y)``; a plain
    LightningModule's own ``training_step`` (:func:`training_step_losses`).

    Returns:
        ``(K,)`` float64 CPU tensor, in the order of ``client_ids``.
    """
    if is_user_module(model):
        return training_step_losses(model, data, client_ids, batch_size)
    splits = [data.client_train(k) for k in client_ids.tolist()]
    sizes = torch.tensor([len(y) for _, y in splits])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])
    x, y = torch.cat([x for x, _ in splits]), torch.cat([y for _, y in splits])
    _, total, loss_sum = evaluate_segments(model, x, y, offsets, batch_size)
    return loss_sum / total


@torch.no_grad()
def training_step_losses(model: LightningModule, data: FederatedData, client_ids: Tensor,
                         batch_size: int = 4096) -> Tensor:
    """Mean of a plain LightningModule's ``training_step`` loss over each listed client's train split.

    Each client's split is cut into chunks of ``batch_size`` samples (``batch_idx`` is the chunk's index);
    a chunk's loss counts with its number of samples, so a ``training_step`` that averages over its batch
    gives the mean over the client's samples. The module runs as the engines train it (same code, same
    weights ``w^t``) but in eval mode and without gradient: dropout is off and BatchNorm uses, and does
    not update, its running statistics, so the value depends on ``w^t`` and the client's data only. It is
    then the same in both engines and on every process of a sharded run (each computes the whole
    cohort's, rounds.py), and measuring it neither draws from the run's random stream nor changes the
    global model's buffers. ``self.log`` calls are no-ops while it runs.

    Returns:
        ``(K,)`` float64 CPU tensor, in the order of ``client_ids`` (``NaN`` for a client without samples).
    """
    losses = torch.full((len(client_ids),), float("nan"), dtype=torch.float64)
    was_training = model.training
    model.eval()
    try:
        with torch.random.fork_rng(devices=[]), quiet_logging(model):
            for i, client in enumerate(client_ids.tolist()):
                x, y = data.client_train(client)
                total = torch.zeros((), dtype=torch.float64)
                for index, start in enumerate(range(0, len(y), batch_size)):
                    xb, yb = x[start : start + batch_size], y[start : start + batch_size]
                    total += step_loss(model.training_step((xb, yb), index)).detach().double().cpu() * len(yb)
                if len(y):
                    losses[i] = total / len(y)
    finally:
        model.train(was_training)
    return losses


@torch.no_grad()
def trained_accuracies(model: ClientModule, layout: FlatStateLayout, rows: Tensor, data: FederatedData,
                       client_ids: Tensor, batch_size: int = 4096) -> Tensor:
    """Accuracy of each client's own trained weights on its full train split (``train_acc_k``, docs/algorithms.md, Notation).

    Client ``k``'s row of ``rows`` replaces the model's floating-point state (``functional_call``: no
    copy into the model), in eval mode and fp32, one client at a time; a client's result depends on
    its weights and data only, so it is the same whichever cohort, engine chunk or process it is in.

    Args:
        model: A model of the run's architecture (its own weights are left untouched).
        layout: The flat layout of ``rows``.
        rows: ``(K, d)`` trained weights ``y_k``, in the order of ``client_ids``.
        data: The federation's data.
        client_ids: ``(K,)`` client ids.
        batch_size: Samples per forward pass.

    Returns:
        ``(K,)`` float64 CPU tensor.
    """
    accuracy = torch.zeros(len(client_ids), dtype=torch.float64)
    was_training = model.training
    model.eval()
    try:
        with torch.autocast(rows.device.type, enabled=False):
            for i, client in enumerate(client_ids.tolist()):
                state = layout.unflatten(rows[i])
                x, y = data.client_train(client)
                correct = 0
                for start in range(0, len(y), batch_size):
                    logits = functional_call(model, state, (x[start : start + batch_size],))
                    correct += int((logits.argmax(-1) == y[start : start + batch_size]).sum())
                accuracy[i] = correct / max(len(y), 1)
    finally:
        model.train(was_training)
    return accuracy


@torch.no_grad()
def evaluate_rows(model: ClientModule, layout: FlatStateLayout, rows: Tensor, splits: list[tuple[Tensor, Tensor]],
                  batch_size: int = 4096) -> tuple[Tensor, Tensor, Tensor]:
    """``(correct, total, loss_sum)``, ``(K,)`` float64 on the CPU, of row ``k`` on split ``k`` (personal models).

    Like :func:`trained_accuracies`: each row replaces the model's floating-point state through
    ``functional_call``, in eval mode and fp32, one client at a time, so a client's result depends only
    on its row and data (any chunking, engine or process gives the same numbers).
    """
    correct = torch.zeros(len(splits), dtype=torch.float64)
    total, loss_sum = torch.zeros_like(correct), torch.zeros_like(correct)
    was_training = model.training
    model.eval()
    try:
        with torch.autocast(rows.device.type, enabled=False):
            for i, (x, y) in enumerate(splits):
                state = layout.unflatten(rows[i])
                for start in range(0, len(y), batch_size):
                    yb = y[start : start + batch_size]
                    logits = functional_call(model, state, (x[start : start + batch_size],)).float()
                    correct[i] += float((logits.argmax(-1) == yb).sum())
                    loss_sum[i] += float(torch.nn.functional.cross_entropy(logits, yb, reduction="sum"))
                total[i] = len(y)
    finally:
        model.train(was_training)
    return correct, total, loss_sum


@dataclass
class ClientEvaluation:
    """The global model evaluated on every client's validation or test split.

    Attributes:
        stage: ``"val"`` (the validation splits) or ``"test"`` (the test splits).
        round_number: Rounds completed when the model was evaluated (the logging step).
        correct: ``(N,)`` correctly classified samples of the split per client.
        total: ``(N,)`` samples of the split per client.
        loss_sum: ``(N,)`` summed loss per client.
        counted: ``(N,)`` bool, the clients the headline metrics cover (the honest ones under an attack);
            ``None``: every client.
        values: The module's own per-client metrics when it overrides ``validation_step``/``test_step``:
            metric key (logged name without ``val/``, ``test/``) -> ``(N,)`` float64, ``NaN`` where a
            client has none (lightning_fl.engines.user_metrics); empty for a plain classifier.
    """

    stage: str
    round_number: int
    correct: Tensor
    total: Tensor
    loss_sum: Tensor
    counted: Tensor | None = None
    values: dict[str, Tensor] = field(default_factory=dict)

    def metric(self, name: str) -> Tensor:
        """``(N,)`` float64 per-client values of metric ``name``, ``NaN`` for clients without samples.

        What the module logs under ``name`` comes first; otherwise ``acc`` is ``correct / total`` and
        ``loss`` is ``loss_sum / total``.

        Raises:
            KeyError: If the module logs no ``name`` and it is neither ``acc`` nor ``loss``.
        """
        if name in self.values:
            return self.values[name]
        if name not in ("acc", "loss"):
            raise KeyError(f"the evaluation has no metric {name!r}; it has {', '.join(self.metric_names)}")
        numerator = self.correct if name == "acc" else self.loss_sum
        safe = torch.where(self.total > 0, self.total, torch.ones_like(self.total))
        return torch.where(self.total > 0, numerator.double() / safe, torch.full_like(safe, float("nan")))

    @property
    def metric_names(self) -> list[str]:
        """Every metric :meth:`metric` answers."""
        return sorted({"acc", "loss", *self.values})

    @property
    def pooled_loss(self) -> float:
        """The loss over every sample of the counted clients."""
        loss_sum, total = (self.loss_sum, self.total) if self.counted is None else \
            (self.loss_sum[self.counted], self.total[self.counted])
        return float(loss_sum.sum() / total.sum().clamp_min(1))


class GlobalModelView:
    """What a callback may read of the global model beyond a round's results (``Federation.global_model``).

    An evaluation service, so that callbacks that score the global model on other data, or train a
    reference beside the federation, never reach into the loop: its weights as a flat copy, a private
    copy of the module, its per-client scores on any split, and the pooled training data.

    Args:
        model: The global model (read, never written, through this view).
        data: The federation's data, on the model's device.
        layout: The flat layout of the model's floating-point state.
        eval_batch_size: Samples per forward pass.
        sharding: The run's process sharding (each rank scores a share, results gathered).
    """

    def __init__(self, model: ClientModule, data: FederatedData, layout: FlatStateLayout, eval_batch_size: int,
                 sharding: ChunkSharding | None = None) -> None:
        self._model, self._data, self._layout = model, data, layout
        self._eval_batch_size, self._sharding = eval_batch_size, sharding

    def weights(self) -> Tensor:
        """``(d,)`` fp32: a copy of the global model's flat state ``w^t``."""
        return self._layout.flatten(self._model.state_dict()).clone()

    @property
    def module_class(self) -> type:
        """The client module's class (what a callback may check without copying the model)."""
        return type(self._model)

    def copy(self) -> ClientModule:
        """A private deep copy of the global model (to train a reference without touching the run's)."""
        return copy.deepcopy(self._model)

    def evaluate(self, split: str) -> tuple[Tensor, Tensor, Tensor]:
        """Per-client ``(correct, total, loss_sum)`` of the global model on ``split`` (``train``, ``val``, ``test``)."""
        x, y, offsets = self._data.split(split)
        return evaluate_segments(self._model, x, y, offsets, self._eval_batch_size, self._sharding)

    def training_data(self) -> tuple[Tensor, Tensor]:
        """Every client's training samples pooled: ``(x_train, y_train)``."""
        return self._data.x_train, self._data.y_train
