"""A callback that kills its own process at a given round on a given rank (fault-injection tests)."""

from __future__ import annotations

import os
import time

import pytorch_lightning as pl
from torch import Tensor

from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import FederatedCallback
from lightning_fl.simulation.federation import Federation


class DieAtRound(FederatedCallback):
    """``os._exit(1)`` on rank ``rank`` at the start of round ``round_idx`` (as a crash or OOM kill would)."""

    def __init__(self, rank: int = 1, round_idx: int = 1) -> None:
        super().__init__()
        self.rank, self.round_idx, self.my_rank = rank, round_idx, 0

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.my_rank = trainer.global_rank

    def on_round_start(self, round_idx: int, client_ids: Tensor, federation: Federation, log: RoundLogger) -> None:
        if round_idx == self.round_idx and self.my_rank == self.rank:
            os._exit(1)


class SleepAtRound(FederatedCallback):
    """Sleeps ``seconds`` on rank ``rank`` at the start of round ``round_idx`` (a long local round)."""

    def __init__(self, rank: int = 0, round_idx: int = 1, seconds: float = 8.0) -> None:
        super().__init__()
        self.rank, self.round_idx, self.seconds, self.my_rank = rank, round_idx, seconds, 0

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.my_rank = trainer.global_rank

    def on_round_start(self, round_idx: int, client_ids: Tensor, federation: Federation, log: RoundLogger) -> None:
        if round_idx == self.round_idx and self.my_rank == self.rank:
            time.sleep(self.seconds)
