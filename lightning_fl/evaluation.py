"""Evaluation of one model on many clients' data in a few large batches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from lightning_fl.data import FederatedData
from lightning_fl.models.base import ClientModule


class ChunkSharding(Protocol):
    """What evaluation needs of :class:`~lightning_fl.distributed.CohortSharding`."""

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


def client_train_losses(model: ClientModule, data: FederatedData, client_ids: Tensor, batch_size: int = 4096) -> Tensor:
    """Mean loss of ``model`` on each listed client's full train split (``loss_before_k``, docs/algorithms.md, Notation).

    Returns:
        ``(K,)`` float64 CPU tensor, in the order of ``client_ids``.
    """
    splits = [data.client_train(k) for k in client_ids.tolist()]
    sizes = torch.tensor([len(y) for _, y in splits])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])
    x, y = torch.cat([x for x, _ in splits]), torch.cat([y for _, y in splits])
    _, total, loss_sum = evaluate_segments(model, x, y, offsets, batch_size)
    return loss_sum / total


@dataclass
class ClientEvaluation:
    """The global model evaluated on every client's test split.

    Attributes:
        stage: ``"val"`` or ``"test"``.
        round_number: Rounds completed when the model was evaluated (the logging step).
        correct: ``(N,)`` correctly classified test samples per client.
        total: ``(N,)`` test samples per client.
        loss_sum: ``(N,)`` summed test loss per client.
    """

    stage: str
    round_number: int
    correct: Tensor
    total: Tensor
    loss_sum: Tensor

    @property
    def pooled_loss(self) -> float:
        return float(self.loss_sum.sum() / self.total.sum().clamp_min(1))
