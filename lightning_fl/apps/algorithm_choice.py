"""Switching the algorithm from the command line: the last aggregation callback given is the run's.

A shipped config names its algorithm in ``trainer.callbacks`` (``FedAvg``, ``FedFa``, ...). Comparing
methods should not need one YAML file per method, so appending another aggregation callback,
``--trainer.callbacks+=Scaffold``, replaces the config's: the CLI keeps the last one given, drops the
earlier ones before anything is built and says so in one line. The saved ``config.yaml`` holds the
algorithm that ran.
"""

from __future__ import annotations

import importlib
from collections.abc import MutableMapping
from typing import Any

import lightning_fl.callbacks as callbacks
from lightning_fl.simulation.callback import AggregationCallback


def algorithm_names() -> list[str]:
    """The aggregation callbacks of :mod:`lightning_fl.callbacks`, by class name (``fit --help`` lists them)."""
    return sorted(name for name in callbacks.__all__
                  if isinstance(getattr(callbacks, name), type)
                  and issubclass(getattr(callbacks, name), AggregationCallback))


def _class_of(entry: Any) -> type | None:
    """The class a ``trainer.callbacks`` entry names (``class_path``, resolved by the parser), or ``None``."""
    class_path = getattr(entry, "class_path", None)
    if class_path is None and isinstance(entry, MutableMapping):
        class_path = entry.get("class_path")
    if not isinstance(class_path, str) or "." not in class_path:
        return None
    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def keep_last_aggregation(trainer: MutableMapping[str, Any]) -> str | None:
    """Keep only the last aggregation callback of ``trainer["callbacks"]``; the line saying what was replaced.

    Args:
        trainer: The parsed ``trainer`` section (changed in place).

    Returns:
        ``"trainer.callbacks: Scaffold replaces FedAvg (...)"`` when an earlier aggregation callback was
        dropped, else ``None``.

    Example:
        >>> from jsonargparse import Namespace
        >>> t = {"callbacks": [Namespace(class_path="lightning_fl.callbacks.FedAvg"),
        ...                    Namespace(class_path="lightning_fl.callbacks.FairnessMetrics"),
        ...                    Namespace(class_path="lightning_fl.callbacks.Scaffold")]}
        >>> keep_last_aggregation(t).split(" (")[0]
        'trainer.callbacks: Scaffold replaces FedAvg'
        >>> [c.class_path.rsplit(".", 1)[1] for c in t["callbacks"]]
        ['FairnessMetrics', 'Scaffold']
    """
    entries = trainer.get("callbacks")
    if not isinstance(entries, list):
        return None
    classes = [_class_of(entry) for entry in entries]
    positions = [i for i, cls in enumerate(classes)
                 if isinstance(cls, type) and issubclass(cls, AggregationCallback)]
    if len(positions) < 2:
        return None
    dropped = positions[:-1]
    kept = classes[positions[-1]].__name__
    replaced = ", ".join(classes[i].__name__ for i in dropped)
    trainer["callbacks"] = [entry for i, entry in enumerate(entries) if i not in dropped]
    return (f"trainer.callbacks: {kept} replaces {replaced} (the last aggregation callback given is the run's"
            " algorithm)")


__all__ = ["algorithm_names", "keep_last_aggregation"]
