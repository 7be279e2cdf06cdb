"""A client learning rate that changes from round to round (``model.lr_scheduler``).

FL papers decay the client learning rate per round (``lr_t = lr_0 gamma^t`` in SCAFFOLD's and FedDyn's
experiments). The schedule is any ``torch.optim.lr_scheduler`` class, configured the LightningCLI way
(``--lr_scheduler ExponentialLR --lr_scheduler.gamma 0.99``, or ``model.lr_scheduler`` in YAML) and
stepped once per round: round ``t`` trains every client with the learning rate the scheduler gives
after ``t`` steps. The scheduler runs on a stand-in optimizer built by the client optimizer's own
factory, so ``base_lrs`` are the configured ``lr``; every engine then builds its client optimizers
with the round's rate (:meth:`ClientLrSchedule.factory`), so the engines and any number of processes
agree, and the scheduler's state is checkpointed, so a resumed run continues the schedule exactly.

With ``interval: step`` (``model.lr_scheduler_interval``) the scheduler is stepped after every local
step instead, from the configured rate at each round's first step: local step ``s`` of every client in
every round trains at the rate after ``s`` steps (a schedule within the round, as Lightning's
``"interval": "step"``).

Schedules that need a monitored metric (``ReduceLROnPlateau``) are refused: a client schedule has no
metric of its own (docs/algorithms.md, Local training).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from lightning_fl.faults.validation import ConfigError, check_choice

__all__ = ["INTERVALS", "ClientLrSchedule", "with_lr"]

#: When the scheduler steps: after every round, or after every local step (restarting each round).
INTERVALS = ("round", "step")

OptimizerFactory = Callable[[Iterable[Tensor]], Optimizer]


def with_lr(factory: OptimizerFactory, lr: float) -> OptimizerFactory:
    """``factory`` whose optimizers start with learning rate ``lr`` in every parameter group."""
    def build(params: Iterable[Tensor]) -> Optimizer:
        optimizer = factory(params)
        for group in optimizer.param_groups:
            group["lr"] = lr
        return optimizer
    return build


class ClientLrSchedule:
    """The per-round client learning rate from a ``torch.optim.lr_scheduler`` (see the module docstring).

    Args:
        scheduler: Builds the scheduler from an optimizer (``model.lr_scheduler``).
        optimizer: The client optimizer's factory (``model.optimizer``).
        interval: ``round`` or ``step`` (:data:`INTERVALS`).

    Raises:
        ConfigError: If the scheduler cannot be built on the client optimizer or needs a metric, or the
            interval is unknown.
    """

    def __init__(self, scheduler: Callable[[Optimizer], Any], optimizer: OptimizerFactory,
                 interval: str = "round") -> None:
        check_choice("model.lr_scheduler_interval", interval, INTERVALS)
        self.interval = interval
        self._step_rates: list[float] = []
        self._optimizer = optimizer([torch.nn.Parameter(torch.zeros(1))])
        try:
            self._scheduler = scheduler(self._optimizer)
        except Exception as err:  # noqa: BLE001 - a scheduler that cannot be built is a config error
            raise ConfigError(f"model.lr_scheduler cannot be built on the client optimizer: {err}") from err
        if isinstance(self._scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            raise ConfigError("model.lr_scheduler: ReduceLROnPlateau needs a monitored metric, which a per-round client"
                              " schedule does not have; use StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR,"
                              " LambdaLR or another scheduler stepped by count")
        if not isinstance(self._scheduler, torch.optim.lr_scheduler.LRScheduler):
            raise ConfigError(f"model.lr_scheduler must build a torch.optim.lr_scheduler.LRScheduler; got"
                              f" {type(self._scheduler).__name__}")

        self._base = self._current()
        # Its settings before the first step (what a resumed run must share), e.g. gamma, base_lrs.
        self.settings = {"class": type(self._scheduler).__name__, "interval": interval,
                         **{k: v for k, v in self._scheduler.state_dict().items()
                            if not k.startswith("_") and k not in ("last_epoch", "verbose")}}

    @classmethod
    def build(cls, scheduler: Callable[[Optimizer], Any] | None, optimizer: OptimizerFactory,
              interval: str = "round") -> ClientLrSchedule | None:
        """The schedule of ``model.lr_scheduler``, or ``None`` when there is none."""
        return None if scheduler is None else cls(scheduler, optimizer, interval)

    def lr(self) -> float:
        """The learning rate of the coming round (the configured one with ``interval: step``)."""
        return self._base if self.interval == "step" else self._current()

    def _current(self) -> float:
        return float(self._optimizer.param_groups[0]["lr"])

    def apply(self, engine: Any, optimizer: OptimizerFactory) -> float:
        """Give ``engine`` this round's rate (its plan's ``lr`` and client optimizers), or with ``interval:
        step`` the rate of each local step; returns the rate of the round's first step."""
        if self.interval == "step":
            engine.plan = replace(engine.plan, step_lr=self.step_rate)
            return self.step_rate(0)
        lr = self.lr()
        engine.plan = replace(engine.plan, lr=lr, optimizer_factory=with_lr(optimizer, lr))
        return lr

    def step_rate(self, step: int) -> float:
        """The rate of local step ``step`` (``interval: step``): the scheduler's after ``step`` steps."""
        while len(self._step_rates) <= step:  # the stand-in never steps per round in this mode
            if self._step_rates:
                self._optimizer.step()
                self._scheduler.step()
            self._step_rates.append(self._current())
        return self._step_rates[step]

    def step(self) -> None:
        """Advance one round (after the round's training; nothing with ``interval: step``)."""
        if self.interval == "step":
            return
        # The stand-in optimizer has no gradients: its step changes nothing, and it tells the scheduler
        # that an optimizer step came first (torch warns otherwise).
        self._optimizer.step()
        self._scheduler.step()

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state and the current learning rate (the scheduler's own state lacks the latter);
        nothing with ``interval: step``, whose rates are the same every round."""
        if self.interval == "step":
            return {}
        return {"scheduler": self._scheduler.state_dict(), "lr": self.lr()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` (from :meth:`state_dict`) left off."""
        if self.interval == "step" or not state:
            return
        self._scheduler.load_state_dict(state["scheduler"])
        for group in self._optimizer.param_groups:
            group["lr"] = float(state["lr"])
