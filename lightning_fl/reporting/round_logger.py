"""The logger facade handed to federated callbacks: scalars, histograms, figures and text of one round.

Tags: one tag, one kind. TensorBoard assigns every tag to one plugin (scalars, histograms, images,
text), so a histogram and an image under the same tag hide each other. :class:`RoundLogger` raises
:class:`TagKindError` when a run reuses a tag for another kind. By convention image tags end in
``_figure`` (``server/weights`` is the histogram, ``server/weights_figure`` the bar chart).

Files, whatever the logger (rank 0 only, under the run directory ``trainer.log_dir``; none with
``--trainer.logger false``, which the loop reports with one info line):

* every figure as ``figures/<tag>/round_<step:04d>.png`` (``figures/server/weights_figure/round_0005.png``);
* when the run has no TensorBoard logger, every histogram's values as ``histograms/<tag>.csv``
  (``step,value``, one row per value, appended each round).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from PIL import Image
from pytorch_lightning.loggers import Logger, MLFlowLogger, TensorBoardLogger, WandbLogger
from pytorch_lightning.utilities.rank_zero import rank_zero_info, rank_zero_only
import torch
from torch import Tensor
from torch.utils.tensorboard import SummaryWriter

from lightning_fl.faults.write_failures import writing
from lightning_fl.reporting.figures import figure_to_image
from lightning_fl.reporting.run_directory import run_directory

#: Records a scalar where ``ModelCheckpoint``/``EarlyStopping`` and the progress bar see it.
MonitorFn = Callable[[str, float, bool], None]

#: The kinds a tag can hold; TensorBoard shows each in its own plugin (tab).
KINDS = ("scalar", "histogram", "image", "text")

_SAFE_SEGMENT = re.compile(r"[^A-Za-z0-9_.=+-]")


class TagKindError(ValueError):
    """A tag was logged as two kinds (e.g. a histogram and an image) in one run."""


def tag_path(tag: str) -> Path:
    """The relative path of ``tag`` under ``figures/`` or ``histograms/``: ``/`` separates folders.

    Characters other than letters, digits and ``_.=+-`` become ``_``; empty, ``.`` and ``..``
    segments are dropped, so a tag never escapes the run directory.

    Example:
        >>> tag_path("server/weights_figure").as_posix()
        'server/weights_figure'
        >>> tag_path("../a b/c").as_posix()
        'a_b/c'
    """
    parts = [_SAFE_SEGMENT.sub("_", part) for part in tag.split("/")]
    parts = [p for p in parts if p not in ("", ".", "..")]
    if not parts:
        raise ValueError(f"tag {tag!r} has no usable name")
    return Path(*parts)


class RunOutputs:
    """What all :class:`RoundLogger` of one run share: the kind of every tag so far, and where files go.

    Args:
        directory: The run directory figures (and histograms without TensorBoard) are written under;
            ``None`` writes no files (ranks other than 0).
        histogram_files: Also write each histogram's values to ``histograms/<tag>.csv`` (the loop sets it
            when the run has no TensorBoard logger).
    """

    def __init__(self, directory: str | Path | None = None, histogram_files: bool = False) -> None:
        self.directory = None if directory is None else Path(directory)
        self.histogram_files = histogram_files
        self.kinds: dict[str, str] = {}
        self.settings: dict[str, float] = {}  # the last value of each setting logged (RoundLogger.log_settings)

    @classmethod
    def of_run(cls, trainer: Any) -> RunOutputs:
        """Tag kinds and figure files of ``trainer``'s run: PNGs under its run directory, on rank 0.

        Histograms also go to CSV files when no logger of the run is a TensorBoard one. Without any logger
        (``trainer.logger: false``) no figure or histogram is kept, and one info line says so.
        """
        log_dir = run_directory(trainer)  # a collective with several processes: every rank asks once
        if not trainer.loggers:
            rank_zero_info("trainer.logger is false: figures and histograms are not saved (any logger, e.g."
                           " CSVLogger, keeps them under its run directory)")
            return cls()
        directory = log_dir if trainer.global_rank == 0 else None
        with_tensorboard = any(isinstance(logger, TensorBoardLogger) for logger in trainer.loggers)
        return cls(directory, histogram_files=not with_tensorboard)

    def claim(self, tag: str, kind: str) -> None:
        """Record that ``tag`` holds ``kind``; raises :class:`TagKindError` if it held another kind."""
        held = self.kinds.setdefault(tag, kind)
        if held != kind:
            raise TagKindError(f"tag {tag!r} was logged as a {held} and now as a {kind}; TensorBoard shows one kind"
                               f" per tag, so give the {kind} its own tag (images end in '_figure', e.g."
                               f" {tag + '_figure'!r})")

    def figure_path(self, tag: str, step: int) -> Path | None:
        """``<directory>/figures/<tag>/round_<step:04d>.png``, or ``None`` when this process writes no files."""
        if self.directory is None:
            return None
        return self.directory / "figures" / tag_path(tag) / f"round_{step:04d}.png"

    def histogram_path(self, tag: str) -> Path | None:
        """``<directory>/histograms/<tag>.csv`` when histograms go to files, else ``None``."""
        if self.directory is None or not self.histogram_files:
            return None
        path = tag_path(tag)
        return self.directory / "histograms" / path.with_name(path.name + ".csv")


class RoundLogger:
    """Logs what a callback measured with one step, the round number, to every logger of the run.

    TensorBoard steps are round numbers: values logged at step ``r`` describe the global model after
    ``r`` completed rounds. A callback never picks the step; the loop builds one ``RoundLogger`` per
    hook call with the right one (``t + 1`` for what round ``t`` produced).

    A tag holds one kind in a run (:class:`TagKindError` otherwise): TensorBoard would show neither
    a histogram nor an image that share a tag. Image tags end in ``_figure`` by convention.

    Args:
        loggers: The run's Lightning loggers.
        step: The round number every value is logged at.
        monitor: Where scalars also go so that ``ModelCheckpoint``/``EarlyStopping`` can monitor them
            (``None`` where Lightning does not allow ``LightningModule.log``).
        outputs: The run's shared tag kinds and file directory (the loop passes one per run); a new
            one without files when ``None``.
    """

    def __init__(self, loggers: Sequence[Logger], step: int, monitor: MonitorFn | None = None,
                 outputs: RunOutputs | None = None, scalars_through_monitor: bool = False) -> None:
        self.loggers = list(loggers)
        self.step = step
        self._monitor = monitor
        self.outputs = RunOutputs() if outputs is None else outputs
        # `validate`/`test`: scalars reach the loggers through Lightning (``monitor`` logs them with
        # logger=True), so that Lightning prints and returns them; written here they would appear twice.
        self.scalars_through_monitor = scalars_through_monitor and monitor is not None
        self._writers: list[Any] | None = None  # TensorBoard writers other than the run's (the partition run)

    def log_scalars(self, metrics: Mapping[str, float], prog_bar: Sequence[str] = (), monitor: bool = True) -> None:
        """Log ``metrics`` (name to value) at :attr:`step`; names in ``prog_bar`` also show in the bar.

        ``monitor=False`` writes them to the loggers only, not to ``trainer.callback_metrics``: for values no
        checkpoint or early stopping would watch, since each ``LightningModule.log`` call costs about half a
        millisecond on a CPU (its result collection walks the metric's state), a tenth of a small round.
        """
        metrics = {name: float(value) for name, value in metrics.items()}
        for name in metrics:
            self.outputs.claim(name, "scalar")
        for logger in self.loggers if not (self.scalars_through_monitor and monitor) else ():
            logger.log_metrics(metrics, step=self.step)
        if self._monitor is not None and monitor:
            for name, value in metrics.items():
                self._monitor(name, value, name in prog_bar)

    def log_settings(self, metrics: Mapping[str, float], monitor: bool = True) -> None:
        """Log the scalars of ``metrics`` whose value differs from the last one logged in this run.

        For settings that stay the same round after round (``dp/delta``, a fixed ``dp/clip_norm``): each
        ``LightningModule.log`` costs a fraction of a millisecond, a tenth of a small round, and a constant
        curve says nothing more than its first point. They are logged at the first round, after a resume,
        and whenever they change.
        """
        changed = {name: float(value) for name, value in metrics.items()
                   if self.outputs.settings.get(name) != float(value)}
        if changed:
            self.log_scalars(changed, monitor=monitor)
            self.outputs.settings.update(changed)

    def log_histogram(self, tag: str, values: Tensor) -> None:
        """A histogram of ``values`` (TensorBoard; ``histograms/<tag>.csv`` when the run has no TensorBoard)."""
        self.outputs.claim(tag, "histogram")
        values = values.detach().cpu()
        # TensorBoard raises on an all-NaN histogram ("The histogram is empty"): a diverged aggregation's
        # weights would end the run in a traceback before its one-line divergence error.
        finite = values[torch.isfinite(values)]
        for writer in self._tensorboards() if finite.numel() else ():
            writer.add_histogram(tag, finite, self.step)
        path = self.outputs.histogram_path(tag)
        if path is not None:
            with writing(path, f"histogram {tag}"):
                path.parent.mkdir(parents=True, exist_ok=True)
                new = not path.exists()
                with open(path, "a") as f:
                    if new:
                        f.write("step,value\n")
                    f.writelines(f"{self.step},{v!r}\n" for v in values.double().flatten().tolist())

    def log_figure(self, tag: str, figure: Figure) -> None:
        """A matplotlib figure: ``figures/<tag>/round_<step>.png``, and an image in TensorBoard, W&B or MLflow.

        The figure is rendered once and then released (it must not be reused).
        """
        self.outputs.claim(tag, "image")
        path = self.outputs.figure_path(tag, self.step)
        tensorboards = self._tensorboards()
        others = [lg for lg in self.loggers if isinstance(lg, (WandbLogger, MLFlowLogger))]
        if getattr(rank_zero_only, "rank", 0) != 0:
            others = tensorboards = []  # their experiments are no-ops on the other ranks
        if path is None and not tensorboards and not others:
            figure_to_image(figure)  # nothing to show it: just release it
            return
        image = figure_to_image(figure)  # (3, H, W) uint8
        for writer in tensorboards:
            writer.add_image(tag, image, self.step)
        pixels = np.ascontiguousarray(image.permute(1, 2, 0).numpy())  # (H, W, 3)
        if path is not None:
            with writing(path, f"figure {tag}"):
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(pixels).save(path, format="PNG")
        for logger in others:
            _log_image_to(logger, tag, pixels, self.step)

    def log_text(self, tag: str, text: str) -> None:
        """Markdown text (TensorBoard loggers)."""
        self.outputs.claim(tag, "text")
        for writer in self._tensorboards():
            writer.add_text(tag, text, self.step)

    def log_partition(self, datamodule: Any, key: str = "") -> None:
        """The partition of a federated datamodule: label heat map, EMD and size histograms, a summary.

        A federation of real-valued targets (``num_classes == 0``) gets the size histogram and the
        summary only: it has no label distribution.

        In TensorBoard the partition is logged once per data set, not once per run: into a run of its
        own, ``<save_dir>/partitions/<data module>-<key>`` (``key``: a digest of the data), written by
        the first run on that data and left alone by the others, so comparing eight runs does not open
        on eight copies of the same heat map. The PNG copy and the other loggers keep it per run.
        """
        shared = RoundLogger(self.loggers, self.step, None, self.outputs)
        shared._writers = self._partition_writers(type(datamodule).__name__, key)
        # Real-valued targets (regression) have no labels to draw or compare; a lazy federation does not count them.
        if datamodule.num_classes > 0 and getattr(datamodule, "has_label_histograms", True):
            shared.log_figure("data/label_distribution_figure", datamodule.partition_figure())
            shared.log_histogram("data/client_emd", datamodule.emd_to_population())
        shared.log_histogram("data/client_train_size", datamodule.data.sizes("train").float())
        summary = datamodule.partition_summary()
        shared.log_text("data/summary", "\n".join(f"- {k}: {v}" for k, v in summary.items()))
        for writer in shared._writers:
            writer.close()

    def _partition_writers(self, data: str, key: str) -> list[Any]:
        """A writer into this data set's partition run per TensorBoard logger; none where it exists already."""
        if getattr(rank_zero_only, "rank", 0) != 0:
            return []
        writers = []
        for logger in self.loggers:
            if isinstance(logger, TensorBoardLogger):
                folder = Path(logger.save_dir) / "partitions" / f"{data}-{key[:12] or 'data'}"
                try:
                    folder.mkdir(parents=True)  # atomic: of two runs starting together, one writes it
                except FileExistsError:
                    continue
                writers.append(SummaryWriter(str(folder)))
        return writers

    def _tensorboards(self) -> list[Any]:
        if self._writers is not None:
            return self._writers
        return [logger.experiment for logger in self.loggers if isinstance(logger, TensorBoardLogger)]

    def at(self, step: int) -> RoundLogger:
        """The same sinks at another step (e.g. an evaluation of round ``r`` logged at ``r``)."""
        return RoundLogger(self.loggers, step, self._monitor, self.outputs)


def _log_image_to(logger: Logger, tag: str, pixels: np.ndarray, step: int) -> None:
    """``pixels`` (``(H, W, 3)`` uint8) through the image API of a W&B or MLflow logger (rank 0 only)."""
    if isinstance(logger, WandbLogger):
        logger.log_image(key=tag, images=[pixels], step=step)
    elif isinstance(logger, MLFlowLogger):
        logger.experiment.log_image(logger.run_id, pixels,
                                    artifact_file=(Path("figures") / tag_path(tag) / f"round_{step:04d}.png").as_posix())
