"""One-line errors: configuration errors raised before training starts, and the errors that stop a run.

Every check names the configuration field and what it accepts, so a researcher who mistypes a
YAML value sees ``error: clients_per_round must be between 1 and 30 (the number of clients); got 40``
instead of a stack trace from the middle of round 0. The CLI prints each of these exceptions as one
``error:`` line (``lightning_fl/apps/cli.py``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any


class ConfigError(ValueError):
    """Invalid configuration value. The message is a single line naming the field."""


class DivergenceError(RuntimeError):
    """A client update, loss or aggregate became NaN/inf; the message names the round and client."""


class CheckpointError(ValueError):
    """A checkpoint cannot be loaded: missing, empty, truncated, corrupt or not a checkpoint.

    The message is one line that starts with the file's path and says what is wrong with it.
    """


class RunWriteError(OSError):
    """A file of the run (checkpoint, client state, figure, CSV, log) could not be written.

    The message is one line naming the file and the cause; the checkpoints written before are unchanged.
    """


class CheckpointWriteError(RunWriteError):
    """A checkpoint could not be written (a full disk, a lost mount); the previous file is unchanged."""


class OutputWriteError(RunWriteError):
    """A figure, CSV or summary of the run could not be written (see :mod:`lightning_fl.faults.write_failures`)."""


class ClientStateError(CheckpointError):
    """A ``model.client_state: disk`` file a checkpoint indexes is missing, empty, truncated or corrupt.

    The message is one line that starts with the file's path and names the client whose record it is.
    """


class ClientStateWriteError(RunWriteError):
    """A ``model.client_state: disk`` file could not be written; the checkpoints written before are unchanged."""


def exception_chain(err: BaseException | None) -> Iterator[BaseException]:
    """``err``, then each exception it was raised from or while handling (``__cause__``, else
    ``__context__``), each once: where the one-line errors find what a wrapper (jsonargparse, torch's
    zip writer, Lightning) hid under its own exception."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        yield err
        seen.add(id(err))
        err = err.__cause__ or err.__context__


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> None:
    """Raise ``ConfigError`` unless ``value`` is one of ``allowed``."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(map(str, allowed))}; got {value!r}")


def check_positive(name: str, value: float, *, integer: bool = False) -> None:
    """Raise ``ConfigError`` unless ``value`` is a finite number > 0 (an int when ``integer``)."""
    if integer and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ConfigError(f"{name} must be an integer >= 1; got {value!r}")
    if not integer and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ConfigError(f"{name} must be a finite number > 0; got {value!r}")


def check_range(name: str, value: float, low: float, high: float, *, what: str = "") -> None:
    """Raise ``ConfigError`` unless ``low <= value <= high``; ``what`` explains the bound."""
    if not (isinstance(value, (int, float)) and low <= value <= high):
        suffix = f" ({what})" if what else ""
        raise ConfigError(f"{name} must be between {low} and {high}{suffix}; got {value!r}")


def check_non_negative(name: str, value: float) -> None:
    """Raise ``ConfigError`` unless ``value`` is a finite number >= 0."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise ConfigError(f"{name} must be a finite number >= 0; got {value!r}")


def check_test_fraction(test_fraction: float) -> None:
    """Raise ``ConfigError`` unless ``0 <= test_fraction < 1``."""
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)) or not 0 <= test_fraction < 1:
        raise ConfigError(f"test_fraction must be a number in [0, 1); got {test_fraction!r}")


def check_val_fraction(val_fraction: float) -> None:
    """Raise ``ConfigError`` unless ``0 <= val_fraction < 1``."""
    if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float)) or not 0 <= val_fraction < 1:
        raise ConfigError(f"val_fraction must be a number in [0, 1) (0: no validation split); got {val_fraction!r}")
