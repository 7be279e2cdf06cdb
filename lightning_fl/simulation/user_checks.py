"""The loop's set-up for its client module: a ClientModule's declared shapes, or a plain LightningModule's contract.

A :class:`~lightning_fl.models.ClientModule` declares ``input_shape`` and ``num_classes``, checked
against the data. A plain ``LightningModule`` (:mod:`lightning_fl.models.user_module`) declares
nothing: one ``training_step`` on a client's first samples checks it instead, and algorithms that read
a statistic its ``training_step`` does not give (a training accuracy) are refused, each before round 1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from pytorch_lightning import LightningModule

from lightning_fl.faults.validation import ConfigError
from lightning_fl.models.user_module import check_user_module, is_user_module, module_optimizer

__all__ = ["check_client", "check_client_statistics", "client_optimizer", "head_prefixes"]


def client_optimizer(client: LightningModule, optimizer: Callable | None, lr_scheduler: Callable | None,
                     interval: str) -> tuple[Callable, Callable | None, str, Callable | None]:
    """``(optimizer factory, lr scheduler, interval, the schedule's stand-in optimizer factory or None)``.

    ``model.optimizer`` when given; otherwise a ClientModule trains with ``torch.optim.SGD`` (its defaults,
    as before ``model.optimizer`` could be absent) and a plain LightningModule with its own
    ``configure_optimizers``, whose scheduler is used unless ``model.lr_scheduler`` is set.
    """
    if optimizer is not None or not is_user_module(client):
        return optimizer or torch.optim.SGD, lr_scheduler, interval, None
    own = module_optimizer(client)
    if lr_scheduler is not None or own.scheduler is None:
        return own.factory, lr_scheduler, interval, None
    return own.factory, own.scheduler, own.interval, own.stand_in


def check_client(model: LightningModule, data: Any, batch_size: int) -> None:
    """The client module against the data, before round 1 (see the module docstring).

    Raises:
        ConfigError: A ClientModule's shapes differ from the data's; a plain LightningModule's
            ``training_step`` fails :func:`~lightning_fl.models.user_module.check_user_module` on the
            first client's first minibatch.
    """
    if is_user_module(model):
        client = int((data.train_offsets.diff() > 0).nonzero()[0])  # the first client with training samples
        x, y = data.client_train(client)
        device = next(model.parameters(), torch.zeros(0)).device
        check_user_module(model, x[:batch_size].to(device), y[:batch_size].to(device))
        return
    if tuple(data.input_shape) != model.input_shape:
        raise ConfigError(f"model.client input shape {model.input_shape} does not match the data's"
                          f" {tuple(data.input_shape)}; set the client's in_features/input size accordingly")
    if data.num_classes != model.num_classes:
        raise ConfigError(f"model.client num_classes must be {data.num_classes} (the data's); got {model.num_classes}")


def check_client_statistics(model: LightningModule, callbacks: Iterable[Any]) -> None:
    """Algorithms that read each client's training accuracy need a ClientModule (a classifier).

    A plain LightningModule's ``training_step`` returns a loss only, so ``train_acc`` does not exist for it.
    """
    if not is_user_module(model):
        return
    for callback in callbacks:
        # FedFa's train_acc: the trained model's accuracy ("trained") or the local steps' ("running").
        if getattr(callback, "requires_trained_accuracy", False) or getattr(callback, "train_acc", None) == "running":
            raise ConfigError(f"{type(callback).__name__} reads each client's training accuracy (train_acc), which"
                              f" model.client {type(model).__name__}'s training_step does not report (it returns a"
                              " loss only); use a lightning_fl.models.ClientModule client or another aggregation")


def head_prefixes(model: LightningModule) -> tuple[str, ...]:
    """The model's head (personalization): a ClientModule's declaration, else the last ``nn.Linear`` layer."""
    declared = getattr(model, "head_prefixes", None)
    if declared is not None:
        return tuple(declared)
    last = [name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)]
    return (f"{last[-1]}.",) if last else ()
