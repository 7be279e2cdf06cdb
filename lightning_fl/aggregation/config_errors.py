"""One-line messages for a mistyped pipeline stage or attack (what jsonargparse reports at length).

``model.aggregation.rule``, ``.pre_aggregator``, ``.transforms``, ``.server_optimizer``,
``model.hierarchy.institution_pipeline.*`` and ``model.attack`` are ``class_path``/``init_args``
entries. jsonargparse checks the class path and option names while parsing, before any of our code
runs, and reports a mistake as a multi-line account of every type it tried; :func:`stage_config_error`
turns it into one line naming the field and the allowed classes, which the CLI raises as a
``ConfigError``.
"""

from __future__ import annotations

import inspect
import re

import lightning_fl.aggregation as aggregation
from lightning_fl.aggregation import attacks
from lightning_fl.aggregation.attacks import Attack
from lightning_fl.aggregation.pre_aggregators import PreAggregator
from lightning_fl.aggregation.rules import CombiningRule
from lightning_fl.aggregation.server_optimizers import ServerOptimizer
from lightning_fl.aggregation.transforms import UpdateTransform

__all__ = ["stage_config_error"]

# Phrases of jsonargparse 4.53 (pinned in requirements.lock); tests/aggregation/test_config_errors.py covers each.
_PARSER_KEY = re.compile(r'Parser key "([^"]+)":')
_CLASS_PROBLEM = re.compile(r"Problem with given class_path '([^']+)':\n\s*(.+)")
_NOT_A_STAGE = re.compile(r"Expected a path but (\S+) either not accessible or invalid")
_UNKNOWN_OPTION = re.compile(r"Option '([^']+)' is not accepted")
#: The last key of a field -> the base class its entries must subclass.
_BASES = {"attack": Attack, "rule": CombiningRule, "pre_aggregator": PreAggregator, "transforms": UpdateTransform,
          "server_optimizer": ServerOptimizer}
_ROOTS = ("model.aggregation", "model.attack", "model.hierarchy")


def _allowed(base: type) -> list[str]:
    """The public classes of ``base``'s kind, as a user writes them in ``class_path``."""
    found = []
    for module in (aggregation, attacks):
        for name in module.__all__:
            cls = getattr(module, name)
            if isinstance(cls, type) and issubclass(cls, base) and cls is not base and not name.endswith("Adaptive"):
                found.append(f"{module.__name__}.{name}")
    return sorted(set(found))


def stage_config_error(report: str) -> str | None:
    """The one-line message for jsonargparse's parse-error ``report``, if a pipeline stage or attack is at fault.

    Args:
        report: The text of jsonargparse's ``ArgumentError``.

    Returns:
        ``None`` when the report is about something else.

    Example:
        >>> stage_config_error('Parser key "model.attack":\\n  - Expected a path but '
        ...                    'lightning_fl.aggregation.attacks.Bogus either not accessible or invalid')
        ... # doctest: +ELLIPSIS
        "model.attack must be one of lightning_fl.aggregation.attacks.ALIE, ...; got 'lightning_fl.aggregation.attacks.Bogus'"
    """
    keys = _PARSER_KEY.findall(report)
    if not keys or not keys[0].startswith(_ROOTS):
        return None
    field = ".".join(keys)
    base = _BASES.get(keys[-1].rsplit(".", 1)[-1])
    if base is None:
        return None
    if wrong := _NOT_A_STAGE.findall(report):  # no such class, or one of another kind
        return f"{field} must be one of {', '.join(_allowed(base))}; got {wrong[-1]!r}"
    problems = _CLASS_PROBLEM.findall(report)
    if not problems:
        return None
    class_path, reason = problems[-1]
    name = class_path.rsplit(".", 1)[-1]
    if (option := _UNKNOWN_OPTION.search(reason)) and (cls := getattr(aggregation, name, getattr(attacks, name, None))):
        options = ", ".join(p for p in inspect.signature(cls).parameters if p not in ("self", "args", "kwargs"))
        return f"{field}.init_args.{option.group(1)} is not an option of {name}; its options are: {options or 'none'}"
    return f"{field} {name}: {reason.strip()}"
