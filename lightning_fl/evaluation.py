"""Evaluation of one model on many clients' data in a few large batches."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from lightning_fl.data import FederatedData
from lightning_fl.models.base import ClientModule


@torch.no_grad()
def evaluate_segments(model: ClientModule, x: Tensor, y: Tensor, offsets: Tensor,
                      batch_size: int = 4096) -> tuple[Tensor, Tensor, Tensor]:
    """Per-client correct counts, sample counts and summed losses of ``model`` on concatenated data.

    The whole tensor is evaluated in chunks of ``batch_size`` regardless of client boundaries, then
    per-sample results are summed per client with ``index_add_``: one pass over the data whatever the
    number of clients.

    Args:
        model: The model to evaluate (switched to eval mode and back).
        x: Inputs of all clients, concatenated.
        y: Labels, aligned with ``x``.
        offsets: ``N + 1`` client offsets into ``x``.
        batch_size: Samples per forward pass.

    Returns:
        ``(correct, total, loss_sum)``, each of shape ``(N,)`` in float64 on the CPU.
    """
    num_clients = len(offsets) - 1
    owner = torch.repeat_interleave(torch.arange(num_clients, device=y.device), offsets.diff().to(y.device))
    correct = torch.zeros(num_clients, dtype=torch.float64, device=y.device)
    loss_sum = torch.zeros_like(correct)
    was_training = model.training
    model.eval()
    for start in range(0, len(y), batch_size):
        xb, yb, ob = x[start : start + batch_size], y[start : start + batch_size], owner[start : start + batch_size]
        logits = model(xb).float()
        correct.index_add_(0, ob, (logits.argmax(1) == yb).double())
        loss_sum.index_add_(0, ob, torch.nn.functional.cross_entropy(logits, yb, reduction="none").double())
    model.train(was_training)
    return correct.cpu(), offsets.diff().double().cpu(), loss_sum.cpu()


def client_train_losses(model: ClientModule, data: FederatedData, client_ids: Tensor, batch_size: int = 4096) -> Tensor:
    """Mean loss of ``model`` on each listed client's full train split (``loss_before_k``, SPEC 1).

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
