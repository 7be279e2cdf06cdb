"""Per-run metrics of a time-to-target comparison: reached or not, rounds and estimated time to the target.

They read what a run with :class:`~lightning_fl.callbacks.RoundsToTarget` (and
:class:`~lightning_fl.callbacks.CommunicationCost` for the time) writes: ``rounds_to_target.json``
holds the first round at which the monitored metric reached the target and the estimated
deployment time ``net/elapsed_seconds`` then (docs/algorithms.md, Rounds to target). A run that
never reached it enters with its whole length: its last evaluated round and its final
``net/elapsed_seconds`` (from its TensorBoard events), a lower bound of its true cost that favours
it (docs/experiments.md, "Reproducing the papers"); :func:`reached` says which runs did.

A target can also be applied after the runs, on the evaluated accuracy series: :func:`rounds_to`,
:func:`seconds_to` and :func:`reached_by` take a rule ``target(results, seed)`` (a fixed accuracy, or
:func:`fraction_of_final`: a declared fraction of a reference method's final accuracy in the same
seed), so a target that depends on where training ends needs no second run.

Each function has the signature of :attr:`~lightning_fl.reproduce.paper.Metric.value` and raises
``KeyError`` where the run has no such file or value (the metric then does not apply to the method).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from lightning_fl.experiments.run_info import read_scalars
from lightning_fl.functional.system import transfer_seconds
from lightning_fl.reproduce.paper import SettingResults

__all__ = ["configured_target", "estimated_seconds_to_target", "first_round_at", "first_scalar", "fraction_of_final",
           "last_scalar", "reached", "reached_by", "rounds_to", "rounds_to_target", "seconds_over_institution_link",
           "seconds_to", "target_result"]

#: The estimated deployment time that :class:`~lightning_fl.callbacks.CommunicationCost` logs every round.
ELAPSED = "net/elapsed_seconds"
#: ``target(results, seed)``: the accuracy (a fraction) a run of that seed must reach.
Target = Callable[[SettingResults, int], float]
Value = Callable[[SettingResults, str, int], float]


def target_result(results: SettingResults, method: str, seed: int) -> dict[str, Any]:
    """The run's ``rounds_to_target.json`` (``round`` is ``None`` where the target was not reached)."""
    path = results.log_dir(method, seed) / "rounds_to_target.json"
    if not path.is_file():
        raise KeyError(f"{method}, seed {seed}: no rounds_to_target.json (the config has no RoundsToTarget)")
    return json.loads(path.read_text())


def reached(results: SettingResults, method: str, seed: int) -> float:
    """1 if the run reached its target, else 0 (the mean over seeds is the fraction that did)."""
    return float(target_result(results, method, seed)["round"] is not None)


def rounds_to_target(results: SettingResults, method: str, seed: int) -> float:
    """The first round at which the monitor reached the target, else the run's last evaluated round."""
    result = target_result(results, method, seed)
    if result["round"] is not None:
        return float(result["round"])
    stage, _, metric = result["monitor"].partition("/")
    rounds, _ = results.series(method, seed, metric, stage)
    if not rounds:
        raise KeyError(f"{method}, seed {seed}: no evaluation of {result['monitor']}")
    return float(rounds[-1])


def estimated_seconds_to_target(results: SettingResults, method: str, seed: int) -> float:
    """``net/elapsed_seconds`` when the target was reached, else at the end of the run."""
    result = target_result(results, method, seed)
    if result["round"] is not None:
        if result.get("estimated_seconds") is None:
            raise KeyError(f"{method}, seed {seed}: no estimated time (the config has no CommunicationCost bandwidths)")
        return float(result["estimated_seconds"])
    return last_scalar(results.log_dir(method, seed), ELAPSED)


def seconds_over_institution_link(bandwidth_mbps: float, latency_ms: float) -> Value:
    """:func:`estimated_seconds_to_target` as if the institution-server link had ``bandwidth_mbps`` and ``latency_ms``.

    The estimate counts, every global iteration, one download and one upload over that link
    (:func:`~lightning_fl.callbacks.communication_cost.estimate_round_seconds`), the same bytes whatever
    the link; so another link adds ``rounds x`` the difference of the two transfers' times, where
    ``rounds`` is :func:`rounds_to_target` and each transfer's bytes are the run's
    ``comm/institution_{down,up}_bytes`` over its institutions. The run's own link comes from its config.

    Raises:
        KeyError: If the run has no institution link (not a three-layer run with
            ``institution_bandwidth_mbps``) or no estimate.
    """

    def value(results: SettingResults, method: str, seed: int) -> float:
        delta = _link_delta(results, method, seed, (bandwidth_mbps, latency_ms))
        return estimated_seconds_to_target(results, method, seed) + rounds_to_target(results, method, seed) * delta

    return value


def _link_delta(results: SettingResults, method: str, seed: int, link: tuple[float, float]) -> float:
    """Per global iteration: the transfer time over ``link`` minus over the run's own institution link."""
    [run] = [r for r in results.runs if r.method == method and r.seed == seed]
    config = yaml.safe_load(Path(run.config).read_text())
    costs = [c.get("init_args", {}) for c in config["trainer"]["callbacks"]
             if str(c.get("class_path", "")).endswith(".CommunicationCost")]
    if not costs or costs[0].get("institution_bandwidth_mbps") is None:
        raise KeyError(f"{method}, seed {seed}: no institution link in the config")
    own = (costs[0]["institution_bandwidth_mbps"], costs[0].get("institution_latency_ms", 0.0))
    institutions = config["model"]["hierarchy"]["num_institutions"]
    delta = 0.0
    for series in _series(run.log_dir, "comm/institution_down_bytes", "comm/institution_up_bytes"):
        size = round(series[0] / institutions)
        delta += transfer_seconds(size, *link) - transfer_seconds(size, *own)
    return delta


def first_round_at(rounds: Sequence[int], values: Sequence[float], target: float) -> int | None:
    """The first round whose value reaches ``target`` (``>=``), ``None`` if none does.

    Example:
        >>> first_round_at([1, 2, 3, 4], [0.5, 0.7, 0.65, 0.8], 0.7)
        2
    """
    return next((r for r, v in zip(rounds, values, strict=True) if v >= target), None)


def configured_target(results: SettingResults, method: str, seed: int) -> float | None:
    """The ``target`` of the run's :class:`~lightning_fl.callbacks.RoundsToTarget`, ``None`` without one."""
    [run] = [r for r in results.runs if r.method == method and r.seed == seed]
    config = yaml.safe_load(Path(run.config).read_text())
    found = [c.get("init_args", {}) for c in config.get("trainer", {}).get("callbacks", [])
             if str(c.get("class_path", "")).endswith(".RoundsToTarget")]
    return float(found[0]["target"]) if found else None


def fraction_of_final(reference: str, fraction: float, metric: str = "acc_pooled") -> Target:
    """The rule ``fraction x`` the ``reference`` method's final test ``metric`` in the same seed."""
    return lambda results, seed: fraction * results.final(reference, seed, metric)


def _first(results: SettingResults, method: str, seed: int, target: Target, metric: str) -> tuple[int | None, int]:
    """The round at which ``method`` first reached the seed's target (or ``None``) and its last evaluated round."""
    rounds, values = results.series(method, seed, metric)
    if not rounds:
        raise KeyError(f"{method}, seed {seed}: no test evaluation of {metric}")
    return first_round_at(rounds, values, target(results, seed)), rounds[-1]


def reached_by(target: Target, metric: str = "acc_pooled") -> Value:
    """1 if the run's test ``metric`` reached the seed's ``target``, else 0."""
    return lambda results, method, seed: float(_first(results, method, seed, target, metric)[0] is not None)


def rounds_to(target: Target, metric: str = "acc_pooled") -> Value:
    """The first round at which the run's test ``metric`` reached the seed's ``target``, else its last round.

    A run that never reached it counts its whole length, a lower bound of its true cost that favours it.
    """

    def value(results: SettingResults, method: str, seed: int) -> float:
        first, last = _first(results, method, seed, target, metric)
        return float(last if first is None else first)

    return value


def seconds_to(target: Target, link: tuple[float, float] | None = None, metric: str = "acc_pooled") -> Value:
    """``net/elapsed_seconds`` at the round :func:`rounds_to` gives (the run's whole length if never reached).

    With ``link`` (``(bandwidth_mbps, latency_ms)``), as if the institution-server link were that one:
    plus, per global iteration, the difference of the two links' transfer times (see
    :func:`seconds_over_institution_link`).
    """
    rounds = rounds_to(target, metric)

    def value(results: SettingResults, method: str, seed: int) -> float:
        at = int(rounds(results, method, seed))
        elapsed = read_scalars(results.log_dir(method, seed), (ELAPSED,))[ELAPSED]
        if at not in elapsed:
            raise KeyError(f"{method}, seed {seed}: no {ELAPSED} at round {at}"
                           " (the config has no CommunicationCost bandwidths)")
        delta = 0.0 if link is None else _link_delta(results, method, seed, link)
        return float(elapsed[at]) + at * delta

    return value


def _series(log_dir: Path, *tags: str) -> list[list[float]]:
    """Each tag's values in step order, from one read of the run's events (``KeyError``: a tag is absent)."""
    scalars = read_scalars(log_dir, tags)
    missing = [tag for tag in tags if not scalars[tag]]
    if missing:
        raise KeyError(f"{log_dir}: no scalar {', '.join(missing)}")
    return [[series[step] for step in sorted(series)] for series in (scalars[tag] for tag in tags)]


def first_scalar(log_dir: Path, tag: str) -> float:
    """The value of ``tag`` at the first step the run's TensorBoard events hold (``KeyError``: none)."""
    return float(_series(log_dir, tag)[0][0])


def last_scalar(log_dir: Path, tag: str) -> float:
    """The value of ``tag`` at the last step the run's TensorBoard events hold.

    Raises:
        KeyError: If the events have no such scalar.
    """
    return float(_series(log_dir, tag)[0][-1])
