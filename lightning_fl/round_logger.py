"""The logger facade handed to federated callbacks: scalars, histograms and figures of one round."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure
from pytorch_lightning.loggers import Logger, TensorBoardLogger
from torch import Tensor

#: Records a scalar where ``ModelCheckpoint``/``EarlyStopping`` and the progress bar see it.
MonitorFn = Callable[[str, float, bool], None]


class RoundLogger:
    """Logs what a callback measured with one step, the round number, to every logger of the run.

    TensorBoard steps are round numbers: values logged at step ``r`` describe the global model after
    ``r`` completed rounds. A callback never picks the step; the loop builds one ``RoundLogger`` per
    hook call with the right one (``t + 1`` for what round ``t`` produced).

    Args:
        loggers: The run's Lightning loggers.
        step: The round number every value is logged at.
        monitor: Where scalars also go so that ``ModelCheckpoint``/``EarlyStopping`` can monitor them
            (``None`` where Lightning does not allow ``LightningModule.log``).
    """

    def __init__(self, loggers: Sequence[Logger], step: int, monitor: MonitorFn | None = None) -> None:
        self.loggers = list(loggers)
        self.step = step
        self._monitor = monitor

    def log_scalars(self, metrics: Mapping[str, float], prog_bar: Sequence[str] = ()) -> None:
        """Log ``metrics`` (name to value) at :attr:`step`; names in ``prog_bar`` also show in the bar."""
        metrics = {name: float(value) for name, value in metrics.items()}
        for logger in self.loggers:
            logger.log_metrics(metrics, step=self.step)
        if self._monitor is not None:
            for name, value in metrics.items():
                self._monitor(name, value, name in prog_bar)

    def log_histogram(self, tag: str, values: Tensor) -> None:
        """A histogram of ``values`` (TensorBoard loggers)."""
        for writer in self._tensorboards():
            writer.add_histogram(tag, values.detach().cpu(), self.step)

    def log_figure(self, tag: str, figure: Figure) -> None:
        """A matplotlib figure as an image (TensorBoard loggers)."""
        for writer in self._tensorboards():
            writer.add_figure(tag, figure, self.step)

    def log_text(self, tag: str, text: str) -> None:
        """Markdown text (TensorBoard loggers)."""
        for writer in self._tensorboards():
            writer.add_text(tag, text, self.step)

    def _tensorboards(self) -> list[Any]:
        return [logger.experiment for logger in self.loggers if isinstance(logger, TensorBoardLogger)]

    def at(self, step: int) -> RoundLogger:
        """The same sinks at another step (e.g. an evaluation of round ``r`` logged at ``r``)."""
        return RoundLogger(self.loggers, step, self._monitor)
