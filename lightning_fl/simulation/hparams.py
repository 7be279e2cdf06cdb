"""TensorBoard's HParams tab: every run's settings beside its final fairness metrics.

At the start of fit the loop writes one HParams session per TensorBoard logger: the algorithm, its
arguments, the client optimizer, local work, cohort, seed and data (from the same record a checkpoint
keeps, :func:`lightning_fl.simulation.resume_check.run_config`), and declares the ``val/*`` and ``test/*``
fairness scalars as the session's metrics. TensorBoard reads each metric's latest value from the run's
scalars, so the table fills in as the run evaluates, and runs can be sorted and filtered by any setting.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pytorch_lightning.loggers import Logger, TensorBoardLogger
from torch.utils.tensorboard.summary import hparams

#: The fairness scalars shown as HParams metrics (those the run logs; see docs/algorithms.md, Fairness metrics).
METRIC_TAGS = tuple(f"{split}/{name}" for split in ("val", "test")
                    for name in ("acc_mean", "acc_worst20", "acc_best20", "acc_var", "acc_pooled", "jain", "loss")
                    ) + ("test/acc_mean_last10pct",  # IGFL's metric, logged once at the end of fit
                         "test/all/acc_mean", "test/all/acc_worst20",  # every client, under model.attack
                         "dp/epsilon")  # the privacy spent so far, under model.dp
_SKIPPED = ("data contents", "model.client shapes")  # a digest and tensor shapes: nothing to sort runs by


def flat_hparams(config: Mapping[str, Any]) -> dict[str, bool | int | float | str]:
    """``config`` as HParams values: nested dicts become ``a.b`` keys, lists and ``None`` become text.

    Example:
        >>> flat_hparams({"model.optimizer": {"class": "SGD", "lr": 0.1}, "data.partition": None, "s": [1, 2]})
        {'model.optimizer.class': 'SGD', 'model.optimizer.lr': 0.1, 'data.partition': 'None', 's': '[1, 2]'}
    """
    flat: dict[str, bool | int | float | str] = {}
    for key, value in config.items():
        if key in _SKIPPED:
            continue
        if isinstance(value, dict):
            flat.update(flat_hparams({f"{key}.{k}": v for k, v in value.items()}))
        elif isinstance(value, (bool, int, float, str)):
            flat[key] = value
        else:
            flat[key] = str(value)
    return flat


def write_hparams(loggers: Iterable[Logger], method: str, config: Mapping[str, Any],
                  metric_tags: Iterable[str] = METRIC_TAGS) -> None:
    """Write one HParams session (``algorithm``: ``method``, plus the flattened ``config``) to every TensorBoard logger.

    Only the session is written: the metrics are the run's own scalars, so no placeholder value is
    logged under their tags.
    """
    params = {"algorithm": method, **flat_hparams(config)}
    for logger in loggers:
        if isinstance(logger, TensorBoardLogger):
            experiment, start, end = hparams(params, {tag: 0.0 for tag in metric_tags})
            writer = logger.experiment._get_file_writer()
            for summary in (experiment, start, end):
                writer.add_summary(summary)
            writer.flush()
