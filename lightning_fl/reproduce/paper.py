"""What a reproduction needs to know about a paper, and the results of one setting's runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_fl.experiments.results import Row
from lightning_fl.experiments.runs import Run
from lightning_fl.reproduce.claims import Claim
from lightning_fl.reproduce.settings import Setting

__all__ = ["SCALES", "Metric", "Paper", "SettingResults", "best_of_values"]

#: ``small``: minutes on a laptop CPU, the same experiment scaled down; ``paper``: the paper's setting.
SCALES = ("small", "paper", "smoke")


@dataclass(frozen=True)
class SettingResults:
    """The runs of one setting over the seeds, with accessors for a metric's value per run.

    ``run_seconds`` is each run's wall time as the runner recorded it when the run trained (a rerun
    that only reads finished runs keeps the original times); ``tuned`` is ``{method: selected setting}``
    (``client_lr=0.03,mu=0.1``) of the methods tuned on the validation splits, and ``tuned_at_edge``
    ``{method: keys}`` of the selected values at the smallest or largest value their grid tried;
    ``tuning_budget`` is ``{method: the budget it was tuned with, in words}`` (``"12 trials x 2 seeds
    (1000, 1001) on val/acc_mean"``), empty when nothing was tuned; ``tuning_failed`` is ``{method: "2 of 6"}``
    of the methods some of whose trials failed (diverged).
    """

    setting: Setting
    seeds: Sequence[int]
    rows: Sequence[Row]
    runs: Sequence[Run]
    run_seconds: Sequence[float] = ()
    tuned: Mapping[str, str] = field(default_factory=dict)
    tuned_at_edge: Mapping[str, Sequence[str]] = field(default_factory=dict)
    tuning_budget: Mapping[str, str] = field(default_factory=dict)
    tuning_failed: Mapping[str, str] = field(default_factory=dict)

    def _rows(self, method: str, seed: int, metric: str, stage: str) -> list[tuple[int, float]]:
        return sorted((r[3], r[6]) for r in self.rows if r[1] == method and r[2] == seed and r[4] == stage
                      and r[5] == metric)

    def final(self, method: str, seed: int, metric: str, stage: str = "test") -> float:
        """``metric`` at the run's last evaluation of ``stage``."""
        series = self._rows(method, seed, metric, stage)
        if not series:
            raise KeyError(f"no {stage} evaluation of {metric} for {method}, seed {seed}")
        return series[-1][1]

    def series(self, method: str, seed: int, metric: str, stage: str = "test") -> tuple[list[int], list[float]]:
        """Rounds and values of ``metric`` at every evaluation of ``stage``."""
        pairs = self._rows(method, seed, metric, stage)
        return [r for r, _ in pairs], [v for _, v in pairs]

    def log_dir(self, method: str, seed: int) -> Path:
        """The run's log folder."""
        [run] = [r for r in self.runs if r.method == method and r.seed == seed]
        return run.log_dir


@dataclass(frozen=True)
class Metric:
    """One number per run that a paper reports.

    Attributes:
        label: Column header in the report.
        value: ``value(results, method, seed)`` in the units shown.
        digits: Decimals shown.
        higher_is_better: Direction (for the report's bold best value).
    """

    label: str
    value: Callable[[SettingResults, str, int], float]
    digits: int = 2
    higher_is_better: bool = True


def best_of_values(setting: Setting, metrics: Mapping[str, Metric],
                   values: Mapping[tuple[str, str], Sequence[float]]) -> dict[tuple[str, str], list[float]]:
    """The values of ``setting``'s ``best_of`` pseudo-methods: per seed, the best of the members' values.

    Args:
        setting: The setting (its ``best_of``).
        metrics: Metric key -> :class:`Metric` (its direction picks the best).
        values: ``{(method, metric key): one value per seed}`` of the trained methods.

    Returns:
        ``{(pseudo-method, metric key): one value per seed}`` for each metric every member has.

    Example:
        >>> s = Setting("s", {"A": "a.yaml", "B": "b.yaml"}, best_of={"best": ["A", "B"]})
        >>> time = {"t": Metric("Time", lambda r, m, s: 0.0, higher_is_better=False)}
        >>> best_of_values(s, time, {("A", "t"): [3.0, 1.0], ("B", "t"): [2.0, 5.0]})
        {('best', 't'): [2.0, 1.0]}
    """
    out = {}
    for name, members in setting.best_of.items():
        for key, metric in metrics.items():
            if all((m, key) in values for m in members):
                pick = max if metric.higher_is_better else min
                columns = [values[(m, key)] for m in members]
                out[(name, key)] = [pick(per_seed) for per_seed in zip(*columns, strict=True)]
    return out


@dataclass(frozen=True)
class Paper:
    """A paper's headline experiment as a reproduction.

    Attributes:
        key: ``PAPER=`` value (``fedfa``).
        title: The paper, as cited in the report.
        experiment: One paragraph: what the paper's experiment is and what runs here instead.
        settings: ``settings(scale)``: the settings to run at a scale.
        metrics: Metric key -> :class:`Metric` (claims name these keys).
        claims: The claims judged.
        paper_values: ``{(setting, method, metric): number}`` as printed in the paper (report only).
        paper_values_status: Where ``paper_values`` come from, as the report says it (``as printed``;
            ``recalled, unverified`` where the paper's table could not be read, and the claims then carry
            no paper numbers).
        scaled_down: ``scaled_down(scale)``: what differs from the paper at a scale, one line each.
        methods_note: Where the methods' settings come from (the paper's, or tuned).
        not_run: ``not_run(scale)``: what the paper reports that this reproduction does not run, one line
            each (the reviewer's checklist).
        discussion: ``discussion(verdicts, values, tuned)``: the likely reasons behind the verdicts, written
            from the measured values (``values[(setting, method, metric)]``: one per seed) and the tuned
            selections (``tuned[setting][method]``, e.g. ``"client_lr=0.03,mu=0.1"``; empty when nothing was
            tuned); ``""`` for none.
    """

    key: str
    title: str
    experiment: str
    settings: Callable[[str], list[Setting]]
    metrics: Mapping[str, Metric]
    claims: Sequence[Claim]
    paper_values: Mapping[tuple[str, str, str], float] = field(default_factory=dict)
    paper_values_status: str = "as printed"
    scaled_down: Callable[[str], list[str]] = lambda scale: []
    methods_note: str = ""
    not_run: Callable[[str], list[str]] = lambda scale: []
    discussion: Callable[[Sequence[Any], Mapping[tuple[str, str, str], Sequence[float]], Mapping[str, Mapping[str, str]]],
                         str] = lambda verdicts, values, tuned: ""
