"""The folder of one run's own files (summaries, client tables, figures, client state): never shared by two runs.

Lightning's ``trainer.log_dir`` is a per-run ``version_N`` folder only for the TensorBoard and CSV
loggers; for any other logger (W&B, MLflow) it is the logger's ``save_dir`` itself, so two runs into
the same ``save_dir`` would overwrite each other's ``fairness_summary.md`` and mix their figures. The
run directory here is, for those loggers, ``<save_dir>/<name>/<version>``: exactly the folder whose
``checkpoints/`` Lightning's ``ModelCheckpoint`` writes (its ``__resolve_ckpt_dir``), so a run's files
and its checkpoints stay together. Without a logger it stays ``default_root_dir`` (where Lightning puts
that run's ``checkpoints/`` too).
"""

from __future__ import annotations

import os
from typing import Any

from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger

__all__ = ["run_directory"]


def run_directory(trainer: Any) -> str | None:
    """This run's folder (see the module docstring); the same on every rank.

    A collective with several processes (``trainer.log_dir`` broadcasts): every rank calls it once.
    """
    log_dir = trainer.log_dir
    loggers = trainer.loggers
    if not loggers or isinstance(loggers[0], (TensorBoardLogger, CSVLogger)):
        return log_dir
    path = None
    if trainer.global_rank == 0:  # a W&B run id exists on rank 0 only
        logger = loggers[0]
        version = logger.version
        version = version if isinstance(version, str) else f"version_{version}"
        path = os.path.join(logger.save_dir or trainer.default_root_dir, str(logger.name), version)
    return trainer.strategy.broadcast(path)
