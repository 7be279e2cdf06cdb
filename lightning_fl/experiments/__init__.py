"""Experiments: configs x seeds in parallel processes, statistics across seeds, fair baselines.

* :func:`run_grid` (:mod:`~lightning_fl.experiments.grid`): the runner behind ``make compare`` and
  ``make tempo`` (``python -m lightning_fl.apps.compare``).
* :mod:`~lightning_fl.experiments.runs`: one resumable training process per config and seed.
* :mod:`~lightning_fl.experiments.stats`: mean, sample std and the 95% Student t interval.
* :mod:`~lightning_fl.experiments.results` and :mod:`~lightning_fl.experiments.run_info`: what the runs wrote.
* :mod:`~lightning_fl.experiments.tuning`: hyperparameter grids selected on the validation splits.

See docs/experiments.md.
"""

from lightning_fl.experiments.grid import GridResult, run_grid
from lightning_fl.experiments.runs import Run, parse_seeds
from lightning_fl.experiments.stats import Stats, stats, t_quantile_975

__all__ = ["GridResult", "Run", "Stats", "parse_seeds", "run_grid", "stats", "t_quantile_975"]
