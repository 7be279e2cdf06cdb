"""One-line messages for a malformed ``partition`` in a configuration (what jsonargparse reports at length).

A partition in YAML is ``{class_path: ..., init_args: {...}}``. jsonargparse checks the class path
and the option names while parsing, before any of our code runs, and reports a mistake as a
multi-line account of every type it tried. :func:`partition_config_error` turns that report into the
one-line message the rest of the configuration gives (``error: partition.alpha is required for
Dirichlet``); :class:`lightning_fl.apps.cli.FederatedCLI` raises it as a ``ConfigError``.
"""

from __future__ import annotations

import importlib
import re

from lightning_fl.datamodules.partitions.base import FIELD, Partition, not_a_partition

__all__ = ["partition_config_error"]

# Phrases of jsonargparse 4.53 (pinned in requirements.lock); tests/test_cli_errors.py covers each.
_KEY = f'Parser key "{FIELD}":'
_CLASS_PROBLEM = re.compile(r"Problem with given class_path '([^']+)':\n\s*(.+)(?:\n\s*(.+))?")
_NOT_SUBCLASS = re.compile(r"Import path (\S+) does not correspond to a subclass of")
_GIVEN = re.compile(r"Given value: (.+)")
_REQUIRED = re.compile(r"the following arguments are required: (.+)")
_UNKNOWN_OPTION = re.compile(r"Option '([^']+)' is not accepted")
_OPTION_KEY = re.compile(r'Parser key "([^"]+)":')


def partition_config_error(report: str) -> str | None:
    """The one-line message for jsonargparse's parse-error ``report``, if the ``partition`` is at fault.

    Args:
        report: The text of jsonargparse's ``ArgumentError``.

    Returns:
        ``None`` when the report is about something else.

    Example:
        >>> partition_config_error('Parser key "partition":\\n  - Expected a dot import path string: zipf\\n'
        ...                        '  Given value: zipf')  # doctest: +ELLIPSIS
        "partition must be one of Dirichlet, IID, ...; got 'zipf'"
    """
    at = report.find(_KEY)
    if at < 0:
        return None
    block = report[at + len(_KEY):]
    problem = _CLASS_PROBLEM.search(block)
    if problem:
        class_path, reason, detail = problem.group(1), problem.group(2).strip(), (problem.group(3) or "").strip()
        cls = _partition_class(class_path)
        if cls is None:
            return not_a_partition(class_path)
        if match := _REQUIRED.fullmatch(reason):
            fields = ", ".join(f"{FIELD}.{name.strip()}" for name in match.group(1).split(","))
            return f"{fields} is required for {cls.__name__}"
        if match := _UNKNOWN_OPTION.fullmatch(reason):
            options = ", ".join(cls.option_names()) or "none"
            return f"{FIELD}.{match.group(1)} is not an option of {cls.__name__}; its options are: {options}"
        if match := _OPTION_KEY.fullmatch(reason):
            return f"{FIELD}.{match.group(1)} of {cls.__name__}: {detail}"
        return f"{FIELD} {cls.__name__}: {reason}"
    if match := _NOT_SUBCLASS.search(block):
        return not_a_partition(match.group(1))
    given = _GIVEN.search(block)
    return not_a_partition(given.group(1).strip() if given else "?")


def _partition_class(class_path: str) -> type[Partition] | None:
    """The Partition subclass ``class_path`` names, or ``None``."""
    module, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name, None) if module else None
    except ImportError:
        return None
    return cls if isinstance(cls, type) and issubclass(cls, Partition) else None
