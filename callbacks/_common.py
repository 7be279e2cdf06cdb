"""Small helpers shared by the server-optimizer and control-variate aggregation callbacks.

Nothing here is algorithm math (that lives in :mod:`lightning_fl.functional`): only how a callback
reads the client optimizer, logs its server state with round-number steps, and keeps checkpointed
tensors.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer


def probe_client_optimizer(loop: Any) -> Optimizer:
    """Build the run's client optimizer on a dummy parameter, to read its class and ``defaults``.

    Args:
        loop: The federated loop (anything with ``optimizer_factory``).
    """
    return loop.optimizer_factory([torch.nn.Parameter(torch.zeros(1))])


def describe_optimizer(optimizer: Optimizer) -> str:
    """``torch.optim.SGD(momentum=0.9)``-style name of an optimizer for messages."""
    cls = type(optimizer)
    public = getattr(torch.optim, cls.__name__, None) is cls
    name = f"torch.optim.{cls.__name__}" if public else f"{cls.__module__}.{cls.__qualname__}"
    momentum = optimizer.defaults.get("momentum")
    return f"{name}(momentum={momentum})" if momentum is not None else name


def is_plain_sgd(optimizer: Optimizer) -> bool:
    """``torch.optim.SGD`` without momentum (so ``nesterov`` and ``dampening`` play no role)."""
    return type(optimizer) is torch.optim.SGD and not optimizer.defaults.get("momentum", 0.0)


def log_server_scalars(loop: Any, round_idx: int, metrics: dict[str, float]) -> None:
    """Log scalars of round ``round_idx`` at step ``round_idx + 1`` (they describe ``w^{t+1}``).

    Called from ``aggregate``, where ``loop.rounds_completed`` is still ``t``; the values go to the
    loggers only (``callback_metrics=False``).
    """
    loop.log_round(metrics, step=round_idx + 1, callback_metrics=False)


def log_server_histogram(loop: Any, round_idx: int, tag: str, values: Tensor) -> None:
    """A TensorBoard histogram of ``values`` at step ``round_idx + 1``."""
    for writer in loop.tensorboard():
        writer.add_histogram(tag, values.detach().float().cpu(), round_idx + 1)


def clone_or_none(value: Tensor | None) -> Tensor | None:
    """A detached copy of ``value`` (``None`` stays ``None``): state dicts never alias live state."""
    return None if value is None else value.detach().clone()


def moved(value: Tensor | None, like: Tensor) -> Tensor | None:
    """``value`` on ``like``'s device and dtype (no copy when it already is): lazy move after loading."""
    return None if value is None else value.to(device=like.device, dtype=like.dtype)
