"""Accuracy of many trained models, each on its own client's full train split, with a cohort forward.

FedFa's ``train_acc_k`` (docs/algorithms.md, Notation) is the accuracy of the trained ``y_k`` on client
``k``'s whole training split. The vectorized engine evaluates all of them with the cohort formulation
it trains with (:mod:`lightning_fl.engines.batched`), a few passes per chunk instead of a Python loop
over clients: clients are ordered by decreasing ``n_k``, so at sample position ``j`` the clients with
``n_k > j`` are a prefix, and each pass folds ``width`` samples of each of those clients into one
``(active * width, ...)`` batch. Rows past a client's end repeat its last sample and are not counted.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from lightning_fl.engines.batched import CohortForward
from lightning_fl.state.flat_state import FlatStateLayout

#: Samples (over all clients of a pass) per forward pass, as in lightning_fl.engines.evaluation.
ROWS_PER_PASS = 4096


@torch.no_grad()
def prefix_correct(forward: CohortForward, params: dict[str, Tensor], x_train: Tensor, y_train: Tensor,
                   offsets: Sequence[int], sizes: Sequence[int], rows_per_pass: int = ROWS_PER_PASS) -> Tensor:
    """Correct predictions of client ``c``'s parameters on its rows ``offsets[c]:offsets[c] + sizes[c]``.

    Args:
        forward: The cohort formulation (rebound here; the caller binds it again before training).
        params: Parameters (and BatchNorm running statistics) ``{name: (C, *shape)}`` in the order of ``sizes``.
        x_train: All clients' training inputs.
        y_train: Their labels.
        offsets: ``C`` first rows of the clients in ``x_train``.
        sizes: ``C`` train sizes, non-increasing.
        rows_per_pass: Samples per forward pass (each active client gets ``rows_per_pass // active``).

    Returns:
        ``(C,)`` float64 CPU correct counts.
    """
    device = y_train.device
    size = torch.tensor(list(sizes), device=device).unsqueeze(1)
    first = torch.tensor(list(offsets), device=device).unsqueeze(1)
    correct = torch.zeros(len(sizes), dtype=torch.long, device=device)
    module = getattr(forward, "module", None)  # dropout off and BatchNorm on running statistics, as in any evaluation
    if module is not None:
        module.eval()
    try:
        start, longest = 0, (max(sizes) if len(sizes) else 0)
        while start < longest:
            active = sum(1 for n in sizes if n > start)
            width = max(1, rows_per_pass // active)
            position = start + torch.arange(width, device=device)
            valid = position < size[:active]
            index = first[:active] + torch.minimum(position, size[:active] - 1)
            forward.bind({name: value[:active] for name, value in params.items()})
            with torch.autocast(device.type, enabled=False):
                logits = forward(x_train[index.flatten()])
            hits = (logits.argmax(-1).view(active, width) == y_train[index]) & valid
            correct[:active] += hits.sum(1)
            start += width
    finally:
        if module is not None:
            module.train()
    return correct.double().cpu()


def cohort_accuracies(forward: CohortForward, layout: FlatStateLayout, weights: Tensor, trainable: set[str],
                      x_train: Tensor, y_train: Tensor, offsets: Sequence[int], sizes: Sequence[int],
                      max_clients: int | None = None) -> Tensor:
    """``(K,)`` float64 accuracy of each row of ``weights`` on its client's full train split.

    Args:
        forward: The engine's cohort formulation.
        layout: The flat layout of ``weights``.
        weights: ``(K, d)`` trained weights ``y_k``; of the float buffers only BatchNorm running
            statistics are read (each row's own, in eval mode); others are the model's, which the
            vectorized engine never trains.
        trainable: Names the formulation binds: parameters and BatchNorm running statistics.
        x_train: All clients' training inputs.
        y_train: Their labels.
        offsets: ``K`` first rows of the cohort's clients in ``x_train`` (cohort order).
        sizes: ``K`` train sizes (cohort order).
        max_clients: Most clients evaluated at once (``None``: all), as in training.
    """
    num = len(sizes)
    order = sorted(range(num), key=lambda p: (-sizes[p], p))
    limit = max_clients or max(num, 1)
    accuracy = torch.zeros(num, dtype=torch.float64)
    for begin in range(0, num, limit):
        part = order[begin : begin + limit]
        rows = weights[torch.tensor(part, device=weights.device)]
        params = {name: value for name, value in layout.unflatten(rows).items() if name in trainable}
        part_sizes = [sizes[p] for p in part]
        correct = prefix_correct(forward, params, x_train, y_train, [offsets[p] for p in part], part_sizes)
        accuracy[torch.tensor(part)] = correct / torch.tensor(part_sizes, dtype=torch.float64).clamp_min(1)
    return accuracy
