"""Experiment settings of a reproduction: methods, their configs and the changes a scale makes.

A :class:`Setting` is one experiment of a paper (a dataset or partition) with its methods; each
method is a shipped config plus dotted changes (``trainer.max_epochs``, ``data.init_args.variant``,
``model.optimizer.init_args.lr``, ``callbacks.<Class>.<arg>`` for an init argument of the callback
of that class, or ``callbacks.<Class>`` to add, replace or remove that callback). :func:`derive_config`
writes the changed config into the reproduction's folder, so every run is a plain config a user can
rerun with ``python -m lightning_fl fit --config``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lightning_fl.faults.validation import ConfigError

__all__ = ["Setting", "apply_changes", "derive_config"]


@dataclass(frozen=True)
class Setting:
    """One experiment of a paper.

    Attributes:
        name: Shown in the report (``"Synthetic(1,1)"``); also the folder of its runs.
        methods: ``{method name: base config}`` in the report's order.
        common: Dotted changes for every method (the scale's rounds, the dataset, ...).
        changes: ``{method name: dotted changes}`` on top of ``common``.
        best_of: ``{pseudo-method name: member methods}``: reported (and usable in claims) like a
            method, its value per seed and metric being the best of its members' (the highest where
            higher is better, else the lowest), e.g. a baseline a paper reports at its best setting
            ("the least time over tau_c 4, 6, 8"). Nothing trains for it.
        tuned_methods: The methods a tuned reproduction tunes on the validation splits, every one with the
            same budget (:func:`~lightning_fl.experiments.tuning.tune`). ``None`` (the default): every
            method, the paper's own included; a list: only those (the others run at the config's values,
            and the report says so); empty: nothing is tuned in this setting.
        objectives: ``{method: val/* metric}`` each tuned method is selected on (the metric its claims
            compare it on, e.g. q-FFL on ``val/acc_worst20``); a method not named uses ``val/acc_mean``.

    Raises:
        ConfigError: If a ``best_of`` name is also a method or a member is not one, or a tuned method is
            not a method.
    """

    name: str
    methods: Mapping[str, str]
    common: Mapping[str, Any] = field(default_factory=dict)
    changes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    best_of: Mapping[str, Sequence[str]] = field(default_factory=dict)
    tuned_methods: Sequence[str] | None = None
    objectives: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = [m for m in self.tuned_methods or () if m not in self.methods]
        if unknown:
            raise ConfigError(f"tuned_methods: {unknown} are not methods of the setting ({', '.join(self.methods)})")
        for name, members in self.best_of.items():
            unknown = [m for m in members if m not in self.methods]
            if name in self.methods or not members or unknown:
                raise ConfigError(f"best_of.{name}: must be a new name over methods of the setting"
                                  f" ({', '.join(self.methods)}); got members {list(members)}")

    @property
    def reported(self) -> list[str]:
        """The methods, then the ``best_of`` pseudo-methods: the rows of the report."""
        return [*self.methods, *self.best_of]

    @property
    def folder(self) -> str:
        """``name`` as a folder name (``Synthetic(1,1)`` -> ``synthetic_1_1``)."""
        kept = "".join(c if c.isalnum() or c == "." else "_" for c in self.name.lower())
        return "_".join(part for part in kept.split("_") if part)


def apply_changes(config: dict[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` with the dotted ``changes`` applied.

    ``callbacks.<Class>.<arg>`` sets an init argument of the callback whose class path ends in
    ``.<Class>``; ``callbacks.<Class>`` set to ``None`` removes that callback, and set to a mapping
    with a ``class_path`` ending in ``.<Class>`` replaces it, or appends it when the config has none;
    any other key is a path of mapping keys (created where missing). Changes apply in order, so an
    added callback's arguments can follow.

    Raises:
        ConfigError: If ``callbacks.<Class>`` (to change or remove) names no callback of the config, a
            callback to add has no ``class_path`` ending in ``.<Class>``.

    Example:
        >>> base = {"trainer": {"callbacks": [{"class_path": "lightning_fl.callbacks.FedFa"}]}}
        >>> apply_changes(base, {"callbacks.FedFa.alpha": 1.0, "trainer.max_epochs": 5})["trainer"]
        {'callbacks': [{'class_path': 'lightning_fl.callbacks.FedFa', 'init_args': {'alpha': 1.0}}], 'max_epochs': 5}
        >>> added = apply_changes(base, {"callbacks.DWFed": {"class_path": "lightning_fl.callbacks.DWFed"}})
        >>> [c["class_path"] for c in added["trainer"]["callbacks"]]
        ['lightning_fl.callbacks.FedFa', 'lightning_fl.callbacks.DWFed']
    """
    out = copy.deepcopy(config)
    for dotted, value in changes.items():
        keys = dotted.split(".")
        if keys[0] == "callbacks":
            _change_callback(out, keys[1], keys[2:], value, dotted)
            continue
        node = out
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return out


def _change_callback(config: dict[str, Any], name: str, arg: list[str], value: Any, dotted: str) -> None:
    callbacks = config.setdefault("trainer", {}).setdefault("callbacks", [])
    matches = [c for c in callbacks if str(c.get("class_path", "")).rpartition(".")[2] == name]
    if not arg and isinstance(value, Mapping):
        if str(value.get("class_path", "")).rpartition(".")[2] != name:
            raise ConfigError(f"{dotted}: a callback to add needs a class_path ending in .{name};"
                              f" got {value.get('class_path')!r}")
        if matches:
            callbacks[callbacks.index(matches[0])] = copy.deepcopy(dict(value))
        else:
            callbacks.append(copy.deepcopy(dict(value)))
        return
    if not matches:
        raise ConfigError(f"{dotted}: the config has no callback {name}; it has"
                          f" {[str(c.get('class_path', '')).rpartition('.')[2] for c in callbacks]}")
    if not arg:
        if value is not None:
            raise ConfigError(f"{dotted}: a whole callback is set to None (remove it) or to a mapping with its"
                              f" class_path (add or replace it); got {value!r}")
        callbacks.remove(matches[0])
        return
    matches[0].setdefault("init_args", {})[".".join(arg)] = value


def derive_config(base: str | Path, changes: Mapping[str, Any], path: Path) -> Path:
    """Write ``base`` with ``changes`` (see :func:`apply_changes`) to ``path``; returns ``path``."""
    config = apply_changes(yaml.safe_load(Path(base).read_text()) or {}, changes)
    path.parent.mkdir(parents=True, exist_ok=True)
    described = ", ".join(f"{k}={v}" for k, v in changes.items()) or "no changes"
    path.write_text(f"# {base} with {described} (written by lightning_fl.reproduce)\n"
                    + yaml.safe_dump(config, sort_keys=False))
    return path
