"""The callbacks a run gets when its trainer has none of their kind.

The core names no algorithm: :mod:`lightning_fl.callbacks` registers its defaults here when it is
imported (FedAvg as the aggregation, FairnessMetrics, the round progress bar), and the CLI imports it.
A Python script that builds a ``Trainer`` with no aggregation callback and never imports
``lightning_fl.callbacks`` gets a one-line error asking for one.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytorch_lightning as pl

from lightning_fl.faults.validation import ConfigError
from lightning_fl.simulation.callback import AggregationCallback

#: Kind -> the default callback's class (``aggregation``, ``metrics``, ``progress_bar``).
_DEFAULTS: dict[str, Callable[[], pl.Callback]] = {}
KINDS = ("aggregation", "metrics", "progress_bar", "round_lines")
#: With progress bars off, this environment variable set to 1 adds the ``round_lines`` default (a line per round).
ROUND_LINES_ENVIRONMENT = "LIGHTNING_FL_ROUND_LINES"


def register_defaults(**classes: type[pl.Callback]) -> None:
    """Make ``classes`` (by kind: ``aggregation=FedAvg, metrics=..., progress_bar=...``) the defaults."""
    unknown = set(classes) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown default-callback kinds {sorted(unknown)}; allowed: {', '.join(KINDS)}")
    _DEFAULTS.update(classes)


def callbacks_to_add(trainer: pl.Trainer) -> list[pl.Callback]:
    """The defaults ``trainer`` lacks, checking that it has at most one aggregation callback."""
    existing = trainer.callbacks
    aggregators = [c for c in existing if isinstance(c, AggregationCallback)]
    if len(aggregators) > 1:
        names = ", ".join(type(c).__name__ for c in aggregators)
        raise ConfigError(f"trainer.callbacks must contain at most one aggregation callback; got {names}")
    if not aggregators and "aggregation" not in _DEFAULTS:
        raise ConfigError("trainer.callbacks has no aggregation callback; add one, e.g."
                          " lightning_fl.callbacks.FedAvg (importing lightning_fl.callbacks makes FedAvg the default)")
    added: list[pl.Callback] = []
    bar = trainer.progress_bar_callback
    default_bar = _DEFAULTS.get("progress_bar")
    if bar is not None and default_bar is not None and not isinstance(bar, default_bar):
        # One bar over the rounds replaces Lightning's per-epoch bar (a round is one batch);
        # nothing is added when the user turned bars off (trainer.enable_progress_bar: false).
        added.append(default_bar())
    lines = _DEFAULTS.get("round_lines")
    if bar is None and lines is not None and os.environ.get(ROUND_LINES_ENVIRONMENT) == "1" and \
            not any(isinstance(c, lines) for c in existing):
        added.append(lines())
    for kind in ("aggregation", "metrics"):
        cls = _DEFAULTS.get(kind)
        if cls is None or any(isinstance(c, cls) for c in existing) or (kind == "aggregation" and aggregators):
            continue
        added.append(cls())
    return added


__all__ = ["KINDS", "ROUND_LINES_ENVIRONMENT", "callbacks_to_add", "register_defaults"]
