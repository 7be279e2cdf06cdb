"""Per-run metrics of a time-to-target comparison: reached or not, rounds and estimated time to the target.

They read what a run with :class:`~lightning_fl.callbacks.RoundsToTarget` (and
:class:`~lightning_fl.callbacks.CommunicationCost` for the time) writes: ``rounds_to_target.json``
holds the first round at which the monitored metric reached the target and the estimated
deployment time ``net/elapsed_seconds`` then (docs/algorithms.md, Rounds to target). A run that
never reached it enters with its whole length: its last evaluated round and its final
``net/elapsed_seconds`` (from its TensorBoard events), a lower bound of its true cost that favours
it (docs/experiments.md, "Reproducing the papers"); :func:`reached` says which runs did.

Each function has the signature of :attr:`~lightning_fl.reproduce.paper.Metric.value` and raises
``KeyError`` where the run has no such file or value (the metric then does not apply to the method).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from lightning_fl.experiments.run_info import read_scalars
from lightning_fl.functional.system import transfer_seconds
from lightning_fl.reproduce.paper import SettingResults

__all__ = ["estimated_seconds_to_target", "first_scalar", "last_scalar", "reached", "rounds_to_target",
           "seconds_over_institution_link", "target_result"]

#: The estimated deployment time that :class:`~lightning_fl.callbacks.CommunicationCost` logs every round.
ELAPSED = "net/elapsed_seconds"


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


def seconds_over_institution_link(bandwidth_mbps: float, latency_ms: float
                                  ) -> Callable[[SettingResults, str, int], float]:
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
            delta += transfer_seconds(size, bandwidth_mbps, latency_ms) - transfer_seconds(size, *own)
        return estimated_seconds_to_target(results, method, seed) + rounds_to_target(results, method, seed) * delta

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
