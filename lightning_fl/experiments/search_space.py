"""Search spaces of the tuner: the hyperparameters each method searches, their ranges, and widening.

A :class:`Param` is one hyperparameter: where it lands in a config (the client optimizer's ``lr`` or
``momentum``, or an init argument of the aggregation callback), its current range, whether it is searched
on a log scale, and the hard limits a widened range never crosses (a momentum below 1, a positive lr).
:data:`SPACES` gives each aggregation callback its parameters (:data:`DEFAULT_SPACE`, the client lr, for
every other method). A selection in the outer :data:`EDGE_FRACTION` of a range (on the log scale for a
log parameter) sits at its edge; :func:`widen` moves that side out by half the range's width, up to the
hard limit. The ranges are documented in docs/experiments.md, "Fair baselines".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

__all__ = ["DEFAULT_SPACE", "EDGE_FRACTION", "SPACES", "Param", "aggregation_of", "apply_point", "edges", "point_label",
           "space_for", "widen", "write_point_config"]

#: A value in the outer 10% of its range (log scale for a log parameter) is at the range's edge.
EDGE_FRACTION = 0.1
#: The client optimizer's arguments a point can set (every other name is an init argument of the callback).
OPTIMIZER_ARGS = {"client_lr": "lr", "client_momentum": "momentum"}


@dataclass(frozen=True)
class Param:
    """One searched hyperparameter.

    Attributes:
        name: ``client_lr`` / ``client_momentum`` (the client optimizer's ``lr`` / ``momentum``), or an
            init argument of the aggregation callback (``mu``, ``q``, ``server_lr``, ...).
        low: Smallest value searched now.
        high: Largest value searched now.
        log: Searched (and widened) on a log scale.
        hard_low: A widened range never goes below this.
        hard_high: A widened range never goes above this.
    """

    name: str
    low: float
    high: float
    log: bool = True
    hard_low: float = 0.0
    hard_high: float = math.inf

    def position(self, value: float) -> float:
        """Where ``value`` lies in ``[low, high]``: 0 at ``low``, 1 at ``high`` (log scale if ``log``)."""
        scale = math.log if self.log else float
        return (scale(value) - scale(self.low)) / (scale(self.high) - scale(self.low))


_LR = Param("client_lr", 1e-3, 1e-1, hard_low=1e-5, hard_high=10.0)
_MOMENTUM = Param("client_momentum", 0.0, 0.9, log=False, hard_high=0.99)
_SERVER_MOMENTUM = Param("server_momentum", 0.0, 0.9, log=False, hard_high=0.99)
#: The space of a method whose aggregation callback has no entry in :data:`SPACES`: the client lr.
DEFAULT_SPACE: tuple[Param, ...] = (_LR,)
#: Per aggregation callback (class name). The papers tune their client lr everywhere; FedFa's also its two
#: momenta (client SGD momentum and the server momentum gamma_s); IGFL its attention temperature; FedProx
#: mu and q-FFL q as in their papers; the server-optimizer baselines their server lr.
SPACES: dict[str, tuple[Param, ...]] = {
    "FedAvg": DEFAULT_SPACE,
    "FedProx": (_LR, Param("mu", 1e-3, 1.0, hard_low=1e-6, hard_high=100.0)),
    "QFFL": (_LR, Param("q", 0.05, 10.0, hard_low=1e-3, hard_high=100.0)),  # step L = 1/lr: the client lr
    "FedAvgM": (_LR, Param("server_lr", 0.1, 3.0, hard_low=1e-3, hard_high=30.0)),
    **{name: (_LR, Param("lr", 1e-3, 1.0, hard_low=1e-6, hard_high=10.0))
       for name in ("FedAdam", "FedYogi", "FedAdagrad")},
    "FedFa": (_LR, _MOMENTUM, _SERVER_MOMENTUM),
    "FedFaMo": (_LR, _MOMENTUM, _SERVER_MOMENTUM),
    "IGFL": (_LR, Param("temperature", 0.1, 10.0, hard_low=1e-3, hard_high=1e3)),
    "DWFed": DEFAULT_SPACE,
    "Tempo": DEFAULT_SPACE,
    "FedAdp": DEFAULT_SPACE,
}


def _load(config: str | Path) -> dict[str, Any]:
    return yaml.safe_load(Path(config).read_text()) or {}


def aggregation_of(config: str | Path) -> str | None:
    """The class name of the first callback in ``config`` that has a space (``None``: none has)."""
    for callback in (_load(config).get("trainer") or {}).get("callbacks") or []:
        name = str(callback.get("class_path", "")).rpartition(".")[2] if isinstance(callback, dict) else ""
        if name in SPACES:
            return name
    return None


def space_for(config: str | Path) -> tuple[Param, ...]:
    """The parameters ``config``'s method searches (by its aggregation callback)."""
    return SPACES.get(aggregation_of(config) or "", DEFAULT_SPACE)


def edges(point: Mapping[str, float], space: Sequence[Param], fraction: float = EDGE_FRACTION) -> dict[str, str]:
    """``{name: "low" | "high"}`` of the values of ``point`` in the outer ``fraction`` of their range.

    A side already at its hard limit does not count: the range covers every value allowed there.

    Example:
        >>> lr = Param("client_lr", 1e-3, 1e-1)
        >>> edges({"client_lr": 0.08}, [lr]), edges({"client_lr": 0.01}, [lr])
        ({'client_lr': 'high'}, {})
    """
    out = {}
    for param in space:
        position = param.position(point[param.name])
        if position <= fraction and param.low > param.hard_low:
            out[param.name] = "low"
        elif position >= 1 - fraction and param.high < param.hard_high:
            out[param.name] = "high"
    return out


def widen(param: Param, side: str) -> Param:
    """``param`` with its ``side`` (``low`` or ``high``) moved out by half the range's width, within the hard limits.

    Example:
        >>> round(widen(Param("client_lr", 1e-3, 1e-1), "high").high, 9)  # two decades wide: one more decade
        1.0
    """
    if param.log:
        step = 0.5 * math.log(param.high / param.low)
        if side == "low":
            return replace(param, low=max(param.hard_low, param.low * math.exp(-step)))
        return replace(param, high=min(param.hard_high, param.high * math.exp(step)))
    step = 0.5 * (param.high - param.low)
    if side == "low":
        return replace(param, low=max(param.hard_low, param.low - step))
    return replace(param, high=min(param.hard_high, param.high + step))


def point_label(point: Mapping[str, float]) -> str:
    """``{"client_lr": 0.0123456, "mu": 0.1}`` -> ``"client_lr=0.0123,mu=0.1"`` (3 significant digits)."""
    return ",".join(f"{key}={value:.3g}" for key, value in point.items())


def apply_point(data: dict[str, Any], point: Mapping[str, float], aggregation: str | None) -> dict[str, Any]:
    """Set ``point`` in the parsed config ``data`` (in place; returned): optimizer args or the callback's."""
    for key, value in point.items():
        if key in OPTIMIZER_ARGS:
            data["model"]["optimizer"].setdefault("init_args", {})[OPTIMIZER_ARGS[key]] = value
            continue
        [callback] = [c for c in data["trainer"]["callbacks"]
                      if str(c.get("class_path", "")).endswith(f".{aggregation}")]
        callback.setdefault("init_args", {})[key] = value
    return data


def write_point_config(config: str | Path, point: Mapping[str, float], path: Path) -> Path:
    """Write ``config`` with ``point`` applied (see :func:`apply_point`) to ``path``; returns ``path``."""
    data = apply_point(_load(config), point, aggregation_of(config))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {config} with {point_label(point)} (written by the tuner)\n"
                    + yaml.safe_dump(data, sort_keys=False))
    return path
