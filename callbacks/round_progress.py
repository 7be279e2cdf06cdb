"""A progress bar that counts communication rounds instead of batches."""

from __future__ import annotations

import sys
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import TQDMProgressBar
from pytorch_lightning.callbacks.progress.tqdm_progress import Tqdm
from typing_extensions import override


class RoundProgressBar(TQDMProgressBar):
    """One bar over all rounds of the run (``Rounds 37/200``) with the latest metrics as postfix.

    The stock bar would show a fresh ``1/1`` bar every epoch, because every epoch of a
    :class:`~lightning_fl.simulation.loop.FederatedLoop` is one batch; per-evaluation bars are hidden for the
    same reason (an evaluation of all clients is one step).

    Args:
        refresh_rate: Update the bar every ``refresh_rate`` rounds.
    """

    def __init__(self, refresh_rate: int = 1) -> None:
        super().__init__(refresh_rate=refresh_rate, leave=True)

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Built with its description, total and start at once: tqdm prints a bar when it is created, so
        # the stock "Training: 0/?" bar followed by a reset would leave a stale line in a log file.
        total = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None
        self.train_progress_bar = Tqdm(desc="Rounds", total=total, initial=trainer.current_epoch,
                                       position=2 * self.process_position, disable=self.is_disabled, leave=True,
                                       dynamic_ncols=True, file=sys.stdout, smoothing=0, bar_format=self.BAR_FORMAT)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        pass

    @override
    def on_train_batch_end(self, *_: Any, **__: Any) -> None:
        pass

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        bar = self.train_progress_bar
        bar.n = trainer.current_epoch + 1
        if self._should_update(bar.n, bar.total or bar.n):
            bar.set_postfix(self.get_metrics(trainer, pl_module))
            bar.refresh()

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pass  # one evaluation of every client is a single step: no bar of its own

    @override
    def on_validation_batch_start(self, *_: Any, **__: Any) -> None:
        pass

    @override
    def on_validation_batch_end(self, *_: Any, **__: Any) -> None:
        pass

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._train_progress_bar is not None and trainer.state.fn == "fit":
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))

    @override
    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics
