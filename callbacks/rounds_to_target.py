"""Rounds-to-target: when a monitored metric first reaches a target (docs/algorithms.md, Rounds to target)."""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.utilities import rank_zero_info
from typing_extensions import override

from lightning_fl.faults.validation import ConfigError, check_choice
from lightning_fl.faults.write_failures import writing
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import FederatedCallback
from lightning_fl.reporting.run_directory import run_directory


class RoundsToTarget(FederatedCallback):
    """Records the first round at which ``monitor`` reaches ``target`` and the wall time to it.

    As in DWFed Table 2 and Tempo Table 1. The wall time counts training and evaluation of this run
    and of the runs it was resumed from (the elapsed time is part of the checkpointed state). With a
    :class:`~lightning_fl.callbacks.CommunicationCost` network model in the run, the estimated deployment time
    (``net/elapsed_seconds``) at that round is recorded too, and with a simulated system
    (``model.system``) the simulated time ``sim/elapsed_seconds`` (stragglers, deadlines and
    transfers on the simulated clock).
    Logs ``target/round``, ``target/seconds`` (and ``target/sim_seconds``) once reached and writes ``rounds_to_target.json`` in
    the log directory at the end of the run.

    The monitor is checked at every evaluation (``val/*`` metrics are computed on the clients'
    validation splits, so the target does not select on test data) and at the end of every round
    (``train/*``, ``net/*`` metrics), including the final model's evaluation at the end of ``fit``.

    Args:
        monitor: A metric name from the loop or another callback, e.g. ``val/acc_mean``.
        target: The value to reach; for an accuracy monitor (a name containing ``acc``) a fraction in
            ``[0, 1]``, not a percentage.
        mode: ``max`` (reached when ``value >= target``) or ``min`` (``value <= target``).
        stop: Stop training once reached.

    Raises:
        ConfigError: If ``mode`` is not ``max`` or ``min``, ``target`` is not a finite number or is
            outside ``[0, 1]`` for an accuracy monitor, or (before round 1, see
            :mod:`lightning_fl.simulation.run_checks`; else at the first evaluation) ``monitor`` is not a metric
            the run logs; each a single line naming the field.

    Example (YAML)::

        - class_path: lightning_fl.callbacks.RoundsToTarget
          init_args: {monitor: val/acc_mean, target: 0.7}
    """

    logged_scalars = ("target/round", "target/seconds", "target/sim_seconds")

    def __init__(self, monitor: str = "val/acc_mean", target: float = 0.8, mode: str = "max",
                 stop: bool = False) -> None:
        check_choice("RoundsToTarget.mode", mode, ("max", "min"))
        if isinstance(target, bool) or not isinstance(target, (int, float)) or not math.isfinite(target):
            raise ConfigError(f"RoundsToTarget.target must be a finite number; got {target!r}")
        if "acc" in monitor and not 0 <= target <= 1:
            raise ConfigError(f"RoundsToTarget.target must be between 0 and 1 for an accuracy monitor ({monitor});"
                              f" got {target!r}")
        self.monitor, self.target, self.mode, self.stop = monitor, target, mode, stop
        self.add_server_state("reached_round")
        self.add_server_state("reached_seconds")
        self.add_server_state("reached_estimated_seconds")
        self.add_server_state("reached_sim_seconds")
        self.add_server_state("elapsed_before", 0.0)  # wall time of earlier sessions (resumed runs)
        self._session_start = time.perf_counter()

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._session_start = time.perf_counter()

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._check(trainer, pl_module)

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._check(trainer, pl_module, evaluated=True)

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.global_step > 0:  # the final model's evaluation (when its round was not evaluated before)
            self._check(trainer, pl_module, evaluated=True)
        log_dir = run_directory(trainer)  # a collective with several processes: every rank asks once
        if log_dir and trainer.global_rank == 0:  # one file, whatever the number of processes
            path = os.path.join(log_dir, "rounds_to_target.json")
            with writing(path, "the rounds-to-target result"):
                os.makedirs(log_dir, exist_ok=True)
                with open(path, "w") as f:
                    json.dump(self.result(), f, indent=2)
        simulated = "" if self.reached_sim_seconds is None else f" ({self.reached_sim_seconds:.1f} simulated s)"
        reached = (f"round {self.reached_round} after {self.reached_seconds:.1f} s{simulated}" if self.reached_round
                   else f"not reached in {trainer.global_step} rounds")
        rank_zero_info(f"Rounds to {self.monitor} {'>=' if self.mode == 'max' else '<='} {self.target}: {reached}")

    def result(self) -> dict[str, Any]:
        """The target, whether and when it was reached."""
        return {"monitor": self.monitor, "target": self.target, "mode": self.mode, "round": self.reached_round,
                "seconds": self.reached_seconds, "estimated_seconds": self.reached_estimated_seconds,
                "sim_seconds": self.reached_sim_seconds}

    def _elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self._session_start

    def _check(self, trainer: pl.Trainer, pl_module: pl.LightningModule, evaluated: bool = False) -> None:
        value = trainer.callback_metrics.get(self.monitor)
        if value is None and evaluated:
            names = sorted(k for k in trainer.callback_metrics if k.startswith("val/"))
            raise ConfigError(f"RoundsToTarget.monitor {self.monitor} is not a metric this run logs; the val/* metrics"
                              f" are {', '.join(names) or 'none (data.val_fraction is 0)'}")
        if self.reached_round is not None or value is None:
            return
        value = float(value)
        hit = value >= self.target if self.mode == "max" else value <= self.target
        if hit and not math.isnan(value):
            self.reached_round = trainer.global_step  # one optimizer step per round: rounds completed
            self.reached_seconds = self._elapsed()
            estimated = trainer.callback_metrics.get("net/elapsed_seconds")
            self.reached_estimated_seconds = None if estimated is None else float(estimated)
            simulated = trainer.callback_metrics.get("sim/elapsed_seconds")
            self.reached_sim_seconds = None if simulated is None else float(simulated)
            scalars = {"target/round": float(self.reached_round), "target/seconds": self.reached_seconds}
            if self.reached_sim_seconds is not None:
                scalars["target/sim_seconds"] = self.reached_sim_seconds
            RoundLogger(pl_module.loggers, self.reached_round).log_scalars(scalars)
            if self.stop:
                trainer.should_stop = True

    @override
    def state_dict(self) -> dict[str, Any]:
        self.elapsed_before, self._session_start = self._elapsed(), time.perf_counter()
        return super().state_dict()

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._session_start = time.perf_counter()

    @property
    @override
    def state_key(self) -> str:
        return self._generate_state_key(monitor=self.monitor, target=self.target, mode=self.mode)
