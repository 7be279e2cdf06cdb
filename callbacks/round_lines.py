"""One plain line per round, for logs read by a program (the experiment runner's progress display)."""

from __future__ import annotations

import time
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.utilities import rank_zero_only
from typing_extensions import override



class RoundLines(pl.Callback):
    """Print ``round 12/60 (0.31 s)`` after every round, flushed, on rank 0.

    A progress bar in a file is carriage returns; these lines are what ``train.log`` of a run started by
    ``make compare`` shows, and what its progress display reads. Added by default when progress bars
    are off and the environment variable ``LIGHTNING_FL_ROUND_LINES`` is ``1``
    (:data:`~lightning_fl.simulation.default_callbacks.ROUND_LINES_ENVIRONMENT`).
    """

    def __init__(self) -> None:
        self._started = 0.0

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._started = time.perf_counter()

    @override
    @rank_zero_only
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        total = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else "?"
        print(f"round {trainer.current_epoch + 1}/{total} ({time.perf_counter() - self._started:.2f} s)", flush=True)
