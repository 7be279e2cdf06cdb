"""Statistics across seeds: mean, sample standard deviation, Student t intervals and one-sample t tests.

The quantiles and p-values of Student's t distribution come from :mod:`scipy.stats` (the reference
implementation, exact to double precision for every ``df``). See docs/experiments.md, "Statistics".
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

__all__ = ["Stats", "aggregate", "seed_bands", "stats", "t_pvalue", "t_quantile", "t_quantile_975", "tail_means"]


def t_quantile(level: float, df: int) -> float:
    """The ``level`` quantile of Student's t with ``df`` degrees of freedom.

    Args:
        level: Probability in ``(0, 1)``; a two-sided interval at confidence ``1 - alpha`` uses
            ``level = 1 - alpha / 2``.
        df: Degrees of freedom, ``>= 1`` (``n - 1`` for ``n`` seeds).

    Returns:
        ``t_{level, df}``.

    Raises:
        ValueError: If ``df < 1`` or ``level`` is outside ``(0, 1)``.

    Example:
        >>> round(t_quantile(0.975, 2), 4), round(t_quantile(0.995, 4), 4)
        (4.3027, 4.6041)
    """
    if df < 1:
        raise ValueError(f"df must be >= 1; got {df}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1); got {level}")
    return float(scipy_stats.t.ppf(level, df))


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (two-sided 95% intervals).

    Raises:
        ValueError: If ``df < 1``.

    Example:
        >>> round(t_quantile_975(2), 4), round(t_quantile_975(120), 3)
        (4.3027, 1.98)
    """
    return t_quantile(0.975, df)


def t_pvalue(values: Sequence[float]) -> float:
    """The two-sided p-value of the one-sample t test of mean 0 (``t = mean / (std / sqrt(n))``).

    Args:
        values: At least two values (one per seed).

    Returns:
        ``P(|T_{n-1}| >= |t|)``; 1.0 when every value is 0 (no evidence), 0.0 when they are all equal
        and not 0 (no spread: the sign is certain).

    Raises:
        ValueError: With fewer than two values (no spread estimate, no test).

    Example:
        >>> round(t_pvalue([1.0, 2.0, 3.0]), 4)  # t = 2 / (1 / sqrt(3)) = 3.4641 on 2 df
        0.0742
    """
    arr = np.asarray(values, dtype=np.float64)
    if arr.size < 2:
        raise ValueError(f"a t test needs at least two values; got {arr.size}")
    mean, std = float(arr.mean()), float(arr.std(ddof=1))
    if std == 0.0:
        return 1.0 if mean == 0.0 else 0.0
    t = mean / (std / math.sqrt(arr.size))
    return float(2.0 * scipy_stats.t.sf(abs(t), arr.size - 1))


@dataclass(frozen=True)
class Stats:
    """Summary of one value per seed.

    Attributes:
        mean: Mean over seeds.
        std: Sample standard deviation (``ddof = 1``; 0 for one seed).
        min: Smallest value.
        max: Largest value.
        n: Number of seeds.
        ci: Half-width of the 95% confidence interval of the mean, ``t_{0.975, n-1} std / sqrt(n)``
            (NaN for one seed: no interval without a spread estimate).
    """

    mean: float
    std: float
    min: float
    max: float
    n: int
    ci: float = math.nan

    @property
    def ci_low(self) -> float:
        return self.mean - self.ci

    @property
    def ci_high(self) -> float:
        return self.mean + self.ci


def stats(values: Sequence[float]) -> Stats:
    """:class:`Stats` of ``values`` (one per seed).

    Example:
        >>> s = stats([1.0, 2.0, 6.0])  # mean 3, sample variance 14 / 2 = 7
        >>> s.mean, round(s.std ** 2, 12), s.n
        (3.0, 7.0, 3)
    """
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise ValueError("stats of no values")
    if arr.size == 1:
        return Stats(float(arr[0]), 0.0, float(arr[0]), float(arr[0]), 1)
    std = float(arr.std(ddof=1))
    ci = t_quantile_975(arr.size - 1) * std / math.sqrt(arr.size)
    return Stats(float(arr.mean()), std, float(arr.min()), float(arr.max()), int(arr.size), ci)


def aggregate(rows: Iterable[tuple[str, int, int, str, float]]) -> dict[tuple[str, str, int], Stats]:
    """``{(method, metric, round): Stats across seeds}`` of ``(method, seed, round, metric, value)`` rows."""
    groups: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for method, _seed, round_number, metric, value in rows:
        groups[(method, metric, round_number)].append(value)
    return {key: stats(values) for key, values in sorted(groups.items())}


def tail_means(rows: Iterable[tuple[str, int, int, str, float]], last: int) -> dict[tuple[str, str], Stats]:
    """``{(method, metric): Stats across seeds}`` of each seed's mean over its ``last`` rounds."""
    curves: dict[tuple[str, str, int], dict[int, float]] = defaultdict(dict)
    for method, seed, round_number, metric, value in rows:
        curves[(method, metric, seed)][round_number] = value
    per_seed: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (method, metric, _seed), curve in sorted(curves.items()):
        per_seed[(method, metric)].append(float(np.mean([curve[r] for r in sorted(curve)[-last:]])))
    return {key: stats(values) for key, values in per_seed.items()}


def seed_bands(rows: Iterable[tuple[str, int, int, str, float]],
               metric: str) -> dict[str, tuple[list[int], list[float], list[float], list[float]]]:
    """``{method: (rounds, mean, min, max)}`` of ``metric`` across seeds, for a band figure.

    Methods keep their order of first appearance in ``rows`` (the legend's order).
    """
    rows = [row for row in rows if row[3] == metric]
    curves: dict[str, tuple[list[int], list[float], list[float], list[float]]] = {row[0]: ([], [], [], []) for row in rows}
    for (method, _metric, round_number), s in aggregate(rows).items():
        rounds, mean, low, high = curves[method]
        rounds.append(round_number)
        mean.append(s.mean)
        low.append(s.min)
        high.append(s.max)
    return curves
