"""Federating a plain ``LightningModule``: its ``training_step`` is the client objective.

A client that is not a :class:`~lightning_fl.models.ClientModule` has no ``loss`` the engines could
call and no declared ``num_classes``/``input_shape``; what it does have is Lightning's contract:
``training_step(batch, batch_idx)`` returns a scalar loss tensor or a dict with ``"loss"``, and
``configure_optimizers`` returns the optimizer (and a scheduler) it trains with. The functions here
are that contract as the engines and the loop use it (docs/algorithms.md, Local training):

* :func:`step_loss` reads the loss out of what ``training_step`` returned, with a one-line error for
  anything else;
* :func:`quiet_logging` makes ``self.log``/``self.log_dict`` no-ops while clients train (no Trainer
  runs a client's steps, and a round's per-step values are not the run's metrics);
* :func:`check_user_module` runs one ``training_step`` at set-up, so bad output fails before round 1;
* :func:`module_optimizer` turns ``configure_optimizers``' answer into the loop's optimizer factory
  and client learning-rate schedule.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from pytorch_lightning import LightningModule
from torch import Tensor
from torch.func import functional_call

from lightning_fl.faults.validation import ConfigError
from lightning_fl.models.base import ClientModule

__all__ = ["UserOptimizer", "check_user_module", "is_user_module", "module_optimizer", "quiet_logging", "step_loss",
           "training_step_at"]

_STEP = "model.client.training_step"
_CONFIGURE = "model.client.configure_optimizers"


def is_user_module(module: object) -> bool:
    """Whether ``module`` is a LightningModule trained through its own ``training_step`` (not a ClientModule)."""
    return isinstance(module, LightningModule) and not isinstance(module, ClientModule)


def _shown(value: object) -> str:
    if isinstance(value, Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    if isinstance(value, Mapping):
        return f"a dict with keys {sorted(map(str, value))}"
    return "None" if value is None else f"a {type(value).__name__}"


def step_loss(output: object) -> Tensor:
    """The loss in what ``training_step`` returned: the tensor itself or ``output["loss"]``.

    Raises:
        ConfigError: If it is not a scalar floating-point tensor (``None``, a vector, a dict without
            ``"loss"``), naming what was returned.
    """
    loss = output.get("loss") if isinstance(output, Mapping) else output
    if isinstance(output, Mapping) and "loss" not in output:
        raise ConfigError(f'{_STEP} must return a scalar loss tensor or a dict with a "loss" key; it returned'
                          f' {_shown(output)} and no "loss"')
    if not isinstance(loss, Tensor) or loss.dim() != 0 or not loss.is_floating_point():
        raise ConfigError(f"{_STEP} must return a scalar loss tensor (or a dict with a \"loss\" key); it returned"
                          f" {_shown(loss)}")
    return loss


def _no_log(*args: Any, **kwargs: Any) -> None:
    """``LightningModule.log`` while a client trains: nothing is recorded."""


@contextmanager
def quiet_logging(module: torch.nn.Module) -> Iterator[None]:
    """``self.log``/``self.log_dict`` of ``module`` and its LightningModule children do nothing inside.

    A client's local steps run without a Trainer (Lightning would warn on every call) and under
    ``vmap`` in the vectorized engine (where logging a tensor cannot work); the instance attributes
    shadow the methods and are removed on exit, so evaluation logs as usual.
    """
    patched = [m for m in module.modules() if isinstance(m, LightningModule) and "log" not in vars(m)]
    for m in patched:
        object.__setattr__(m, "log", _no_log)
        object.__setattr__(m, "log_dict", _no_log)
    try:
        yield
    finally:
        for m in patched:
            object.__delattr__(m, "log")
            object.__delattr__(m, "log_dict")


def check_user_module(module: LightningModule, x: Tensor, y: Tensor) -> None:
    """One ``training_step`` on ``(x, y)`` at set-up: what round 1 would otherwise fail on, as one line.

    The module's own generator draws (dropout) are not taken from the run's: the global RNG is restored.

    Raises:
        ConfigError: No trainable parameters; ``training_step`` returns no scalar loss or one that does not
            depend on the parameters.
    """
    if not any(p.requires_grad for p in module.parameters()):
        raise ConfigError(f"model.client ({type(module).__name__}) has no trainable parameters (requires_grad):"
                          " there is nothing to federate")
    was_training = module.training
    module.train()
    try:
        with torch.random.fork_rng(devices=[]), torch.enable_grad(), quiet_logging(module):
            loss = step_loss(module.training_step((x, y), 0))
    finally:
        module.train(was_training)
    if not loss.requires_grad:
        raise ConfigError(f"{_STEP} must return a loss that depends on the parameters; it returned a tensor without"
                          " a gradient (detached, or computed under no_grad)")


class UserOptimizer:
    """What ``configure_optimizers`` gave: the client optimizer factory and a scheduler, if any.

    Attributes:
        factory: Builds the client optimizer (class and first group's hyperparameters) on any parameters.
        scheduler: ``optimizer -> scheduler`` for :class:`~lightning_fl.simulation.lr_schedule.ClientLrSchedule`
            (it returns the module's own scheduler), or ``None``.
        stand_in: ``params -> the module's optimizer``, whose parameters were swapped for an empty one: the
            schedule's stand-in, so the scheduler steps an optimizer that owns none of the model's weights.
        interval: ``round`` (Lightning's ``"epoch"``) or ``step``.
    """

    def __init__(self, factory: Callable[..., torch.optim.Optimizer], scheduler: Any, stand_in: torch.optim.Optimizer,
                 interval: str) -> None:
        self.factory, self.interval = factory, interval
        self.scheduler = None if scheduler is None else (lambda _optimizer: scheduler)
        self.stand_in = lambda _params: stand_in


def _split(answer: object) -> tuple[list[Any], list[Any]]:
    """Lightning's forms of ``configure_optimizers``' answer -> (optimizers, schedulers)."""
    if isinstance(answer, Mapping):
        return [answer.get("optimizer")], [answer["lr_scheduler"]] if answer.get("lr_scheduler") is not None else []
    if isinstance(answer, (list, tuple)):
        if len(answer) == 2 and all(isinstance(part, (list, tuple)) for part in answer):
            return list(answer[0]), list(answer[1])
        optimizers, schedulers = [], []
        for item in answer:
            more, scheds = _split(item) if isinstance(item, Mapping) else ([item], [])
            optimizers += more
            schedulers += scheds
        return optimizers, schedulers
    return [answer], []


def module_optimizer(module: LightningModule) -> UserOptimizer:
    """The client optimizer of ``model.client.configure_optimizers`` (used when ``model.optimizer`` is absent).

    Every client builds the returned optimizer's class with its hyperparameters (first and only parameter
    group; ``lr`` before any scheduler changed it); a returned scheduler becomes the client learning-rate
    schedule, stepped every round (``interval: "epoch"``, Lightning's default) or every local step
    (``"step"``), as ``model.lr_scheduler`` would be.

    Raises:
        ConfigError: Not exactly one optimizer, several parameter groups or schedulers, a scheduler
            ``frequency`` other than 1.
    """
    answer = module.configure_optimizers()
    optimizers, schedulers = _split(answer)
    if len(optimizers) != 1 or not isinstance(optimizers[0], torch.optim.Optimizer):
        names = ", ".join(type(o).__name__ for o in optimizers)
        shown = _shown(answer) if len(optimizers) == 1 else f"{len(optimizers)} optimizers ({names})"
        raise ConfigError(f"{_CONFIGURE} must return one optimizer (each client trains with one); it returned"
                          f" {shown}: return one, or set model.optimizer")
    optimizer = optimizers[0]
    if len(optimizer.param_groups) != 1:
        raise ConfigError(f"{_CONFIGURE} must return an optimizer with one parameter group; it returned"
                          f" {type(optimizer).__name__} with {len(optimizer.param_groups)}: set model.optimizer instead")
    if len(schedulers) > 1:
        raise ConfigError(f"{_CONFIGURE} must return at most one lr scheduler; it returned {len(schedulers)}")
    group = optimizer.param_groups[0]
    settings = {k: group[k] for k in optimizer.defaults if k in group}
    settings["lr"] = group.get("initial_lr", group["lr"])  # a scheduler's constructor may have changed lr already
    factory = functools.partial(type(optimizer), **settings)
    scheduler, interval = None, "round"
    if schedulers:
        entry = schedulers[0]
        scheduler = entry.get("scheduler") if isinstance(entry, Mapping) else entry
        if isinstance(entry, Mapping):
            if entry.get("frequency", 1) != 1:
                raise ConfigError(f"{_CONFIGURE}: an lr scheduler frequency other than 1 is not supported; it returned"
                                  f" {entry['frequency']}")
            interval = {"epoch": "round", "step": "step"}.get(entry.get("interval", "epoch"), entry.get("interval"))
    # The scheduler keeps stepping this very optimizer; it must own none of the model's parameters.
    empty = torch.nn.Parameter(torch.zeros(0))
    for g in optimizer.param_groups:
        g["params"] = [empty]
    optimizer.state.clear()
    return UserOptimizer(factory, scheduler, optimizer, interval)


class _TrainingStepCall(torch.nn.Module):
    """``module.training_step`` as a ``forward``, so ``torch.func.functional_call`` can run it at other weights."""

    def __init__(self, module: LightningModule) -> None:
        super().__init__()
        self.module = module

    def forward(self, batch: Any, batch_idx: int) -> Any:
        return self.module.training_step(batch, batch_idx)


def training_step_at(module: LightningModule, state: Mapping[str, Tensor], batch: Any, batch_idx: int) -> Tensor:
    """The loss of ``module.training_step(batch, batch_idx)`` with ``state`` (names of ``module``) as its weights."""
    wrapped = _TrainingStepCall(module)
    return step_loss(functional_call(wrapped, {f"module.{n}": v for n, v in state.items()}, (batch, batch_idx)))
