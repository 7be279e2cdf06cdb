"""The arithmetic of a simulated round: transfer times, work that fits a deadline, who finishes first.

Pure functions over tensors; :class:`~lightning_fl.simulation.system.SystemHeterogeneity` draws the random
inputs and applies them to a round (docs/system.md).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

# A step that fits exactly must not be lost to rounding: (10 - 7) * 0.1 is 0.30000000000000004,
# 0.3 / 0.1 is 2.9999999999999996.
_EPS = 1e-9


def transfer_seconds(num_bytes: int, bandwidth_mbps: float | None, latency_ms: float) -> float:
    """Time to send ``num_bytes`` over a link of ``bandwidth_mbps`` megabits/s and ``latency_ms`` latency.

    ``bandwidth_mbps=None`` is an infinitely fast link (only the latency counts).

    Example:
        >>> transfer_seconds(1_000_000, 8.0, 50.0)  # 8 Mbit at 8 Mbit/s, plus 50 ms
        1.05
    """
    return latency_ms / 1e3 + (0.0 if bandwidth_mbps is None else num_bytes * 8 / (bandwidth_mbps * 1e6))


def steps_within(seconds: float, speeds: Tensor, full_steps: Tensor) -> Tensor:
    """Local steps each client completes in ``seconds`` of compute: ``floor(seconds * s_k)``, in ``[1, tau_k]``.

    At least one step: a straggler that is kept contributes something (the partial-work policy).

    Example:
        >>> steps_within(2.5, torch.tensor([1.0, 4.0, 100.0]), torch.tensor([10, 10, 10])).tolist()
        [2, 10, 10]
    """
    fit = torch.floor(seconds * speeds.double() + _EPS).long()
    return torch.minimum(fit.clamp_min(1), full_steps)


def pick_fraction(draws: Tensor, fraction: float) -> Tensor:
    """``(n,)`` bool: the ``round(fraction * n)`` entries with the smallest ``draws`` (ties: position).

    The FedProx paper's stragglers: an exact share of the cohort, chosen at random each round.

    Example:
        >>> pick_fraction(torch.tensor([0.9, 0.1, 0.5, 0.3]), 0.5).tolist()
        [False, True, False, True]
    """
    n = len(draws)
    count = min(n, math.floor(fraction * n + 0.5))
    picked = torch.zeros(n, dtype=torch.bool)
    order = sorted(range(n), key=lambda i: (float(draws[i]), i))
    picked[order[:count]] = True
    return picked


def uniform_epochs(draws: Tensor, local_epochs: int) -> Tensor:
    """Epochs drawn uniformly from ``{1, ..., E}`` from uniforms in ``[0, 1)``.

    Example:
        >>> uniform_epochs(torch.tensor([0.0, 0.249, 0.25, 0.999]), 4).tolist()
        [1, 1, 2, 4]
    """
    return (torch.floor(draws * local_epochs).long() + 1).clamp(1, local_epochs)


def first_finishers(finish_seconds: Tensor, tie_breaks: Tensor, finished: Tensor, count: int) -> Tensor:
    """``(n,)`` bool: the first ``count`` clients to finish among those that do.

    Clients that finish at the same simulated time are ordered by ``tie_breaks`` (random draws), so
    no client id is favoured.

    Example:
        >>> first_finishers(torch.tensor([3.0, 1.0, 2.0, 1.0]), torch.tensor([0.1, 0.9, 0.5, 0.2]),
        ...                 torch.tensor([True, True, True, True]), 2).tolist()
        [False, True, False, True]
    """
    candidates = [i for i in range(len(finish_seconds)) if bool(finished[i])]
    candidates.sort(key=lambda i: (float(finish_seconds[i]), float(tie_breaks[i]), i))
    kept = torch.zeros(len(finish_seconds), dtype=torch.bool)
    kept[candidates[:count]] = True
    return kept


def samples_seen(num_samples: Tensor, steps: Tensor, batch_size: int) -> Tensor:
    """Distinct training samples a client saw in ``steps`` minibatch steps: ``min(n_k, steps * B)``.

    Only an epoch's last batch can be short, so ``steps`` batches of a first epoch hold ``steps * B``
    samples until the epoch is complete.

    Example:
        >>> samples_seen(torch.tensor([25, 25, 25]), torch.tensor([1, 3, 6]), 10).tolist()
        [10, 25, 25]
    """
    return torch.minimum(num_samples, steps * batch_size)
