"""Checks of a run's settings that Lightning would otherwise report mid-run, or not at all.

Each problem is one line, before round 1: a ``ConfigError`` naming the field and what it accepts
where the run cannot mean what was asked (``--trainer.check_val_every_n_epoch 0``, a monitor no
callback logs, a Trainer option that has no meaning when a round is one training step), a
``rank_zero_warn`` where an option is merely ignored. :func:`check_trainer` runs on the parsed
configuration (``FederatedCLI.before_instantiate_classes``); :func:`check_setup` and
:func:`check_engine` run in the loop's ``setup``, once the data and the callbacks are known.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Any

import torch
from pytorch_lightning.utilities import rank_zero_warn

from lightning_fl.validation import ConfigError

#: The largest seed numpy (and so ``seed_everything``) accepts.
SEED_MAX = 2 ** 32 - 1
#: Trainer options whose per-batch meaning does not carry over to a round, with the only value allowed.
ROUND_IS_ONE_STEP = {
    "gradient_clip_val": (None, "the clients' local steps are not Lightning's, so it would clip nothing"),
    "accumulate_grad_batches": (1, "each round's update is already the whole cohort's, there is nothing to"
                                   " accumulate"),
    "limit_train_batches": (1.0, "the round is the epoch's only batch, and a part of it is no round"),
}
_NON_FINITE = re.compile(r"(?:Given|Got) value: ([+-]?(?:nan|inf|infinity))\b", re.IGNORECASE)
#: The scalars the loop logs itself, whatever its callbacks (``val/loss`` only with validation splits).
LOOP_SCALARS = ("train/loss", "train/acc", "round/seconds", "round/clients", "val/loss", "test/loss")
#: Logged with ``model.system`` (docs/system.md).
SYSTEM_SCALARS = ("clients/available", "clients/sampled", "clients/kept", "clients/dropped", "clients/stragglers",
                  "clients/over_selected", "clients/partial_steps", "sim/round_seconds", "sim/elapsed_seconds")
#: Modules whose callbacks declare what they log (``FederatedCallback.logged_scalars``) or log nothing.
_KNOWN_MODULES = ("lightning_fl.", "pytorch_lightning.", "lightning.")


def check_seed(seed: Any) -> None:
    """``seed_everything``: a seed numpy accepts, or ``true`` (random) / ``false`` (not seeded)."""
    if not isinstance(seed, bool) and not (isinstance(seed, int) and 0 <= seed <= SEED_MAX):
        raise ConfigError(f"seed_everything must be an integer between 0 and {SEED_MAX} (or true for a random"
                          f" seed); got {seed!r}")


def non_finite_error(message: str) -> str | None:
    """One line for jsonargparse's report on ``--field nan`` / ``inf`` (a float option); else ``None``."""
    value = _NON_FINITE.search(message)
    keys = re.findall(r'Parser key "([^"]+)"', message)
    if value is None or not keys or "<class 'float'>" not in message:
        return None
    field = keys[0] + "".join(f".init_args.{key}" for key in keys[1:])
    return f"{field} must be a finite number; got {value.group(1)}"


def check_trainer(subcommand: str | None, trainer: Mapping[str, Any]) -> None:
    """One-line errors for Trainer settings the loop cannot honour (see the module docstring)."""
    every = trainer.get("check_val_every_n_epoch")
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
        raise ConfigError(f"trainer.check_val_every_n_epoch must be an integer >= 1 (evaluate every this many"
                          f" rounds); got {every!r}")
    check_accelerator(trainer.get("accelerator"))
    for field, (allowed, why) in ROUND_IS_ONE_STEP.items():
        value = trainer.get(field)
        if value is not None and value != allowed and not (allowed == 1.0 and value == 1):
            shown = "null" if allowed is None else allowed
            raise ConfigError(f"trainer.{field} must be {shown} (a round is one training step of the loop:"
                              f" {why}); got {value!r}")
    rounds = trainer.get("max_epochs")
    if subcommand == "fit" and isinstance(rounds, int) and not isinstance(rounds, bool) and rounds == 0:
        raise ConfigError("trainer.max_epochs must be an integer >= 1 (the number of rounds; -1: no limit); got 0,"
                          " which trains nothing")


def check_accelerator(accelerator: Any) -> None:
    """``gpu``/``cuda``/``mps`` without such a device is one line, not Lightning's traceback."""
    name = str(getattr(accelerator, "class_path", accelerator)).rsplit(".", 1)[-1].lower()
    missing = {"gpu": not torch.cuda.is_available() and not _mps(), "cuda": not torch.cuda.is_available(),
               "cudaaccelerator": not torch.cuda.is_available(), "mps": not _mps()}
    if missing.get(name, False):
        raise ConfigError(f"trainer.accelerator {name} needs a device of that kind and this machine has none; use"
                          " cpu or auto")


def _mps() -> bool:
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def check_setup(loop: Any, data: Any, stage: str) -> None:
    """Before round 1, once the data and callbacks are known: test splits and monitored metric names."""
    if data.test_offsets[-1] == 0 and stage in ("fit", "test"):
        fraction = getattr(loop.trainer.datamodule, "test_fraction", None)
        raise ConfigError(f"data.test_fraction must be in (0, 1): no client has a test sample, so the run could not be"
                          f" evaluated; got {fraction}")
    sizes = data.test_offsets.diff()
    empty = (sizes == 0).nonzero().flatten().tolist()
    if empty and stage in ("fit", "test"):
        shown = ", ".join(map(str, empty[:5])) + (", ..." if len(empty) > 5 else "")
        rank_zero_warn(f"data: {len(empty)} of {len(sizes)} clients ({shown}) have no test sample; they are left out"
                       " of the test/* fairness metrics")
    if stage == "fit":
        check_monitors(loop.trainer.callbacks, data.has_validation, loop.system is not None,
                       loop.on_client_divergence == "drop")


def logged_scalars(callbacks: Iterable[Any], validation: bool, system: bool, drop: bool) -> list[str] | None:
    """Names (``fnmatch`` patterns) of the scalars a run logs; ``None`` if a callback's are unknown."""
    names = [n for n in LOOP_SCALARS if validation or not n.startswith("val/")]
    names += list(SYSTEM_SCALARS) if system else []
    names += ["clients/diverged"] if drop else []
    for callback in callbacks:
        declared = getattr(callback, "logged_scalars", None)
        if declared is None and not type(callback).__module__.startswith(_KNOWN_MODULES):
            return None  # a third-party callback may log anything
        names += [n for n in declared or () if validation or not n.startswith("val/")]
    return names


def check_monitors(callbacks: list[Any], validation: bool, system: bool, drop: bool) -> None:
    """Every ``monitor`` (EarlyStopping, ModelCheckpoint, RoundsToTarget) names a scalar the run logs."""
    names = logged_scalars(callbacks, validation, system, drop)
    if names is None:
        return
    for callback in callbacks:
        monitor = getattr(callback, "monitor", None)
        if isinstance(monitor, str) and not any(fnmatchcase(monitor, n) for n in names):
            near = [n for n in names if n.split("/")[0] == monitor.split("/")[0]] or names
            raise ConfigError(f"{type(callback).__name__}.monitor must be a metric this run logs, one of"
                              f" {', '.join(near)}; got {monitor!r}")


def check_engine(engine: Any, max_parallel_clients: int | None) -> None:
    """``max_parallel_clients`` bounds a vectorized engine only; with the sequential one it is a no-op."""
    if max_parallel_clients is not None and engine.name == "sequential":
        rank_zero_warn(f"model.max_parallel_clients {max_parallel_clients} is ignored: the sequential engine trains"
                       " one client at a time (it bounds the vectorized engine)")


def check_hierarchy_options(hierarchy: Any, clients_per_round: int, sampling: str) -> None:
    """With a hierarchy every client trains each round: a cohort size or sampling mode is ignored."""
    ignored = [f"{name} {value}" for name, value, default in (("clients_per_round", clients_per_round, 10),
                                                              ("sampling", sampling, "uniform"))
               if value not in (default, "all")]
    if hierarchy is not None and ignored:
        verb = "are" if len(ignored) > 1 else "is"
        rank_zero_warn(f"model.{' and model.'.join(ignored)} {verb} ignored: with model.hierarchy every client of"
                       " every institution trains each round")


__all__ = ["check_accelerator", "check_engine", "check_hierarchy_options", "check_monitors", "check_seed",
           "check_setup", "check_trainer", "logged_scalars", "non_finite_error"]
