"""Statistics across seeds: mean, sample standard deviation and a Student t confidence interval.

No scipy: the two-sided 95% quantile ``t_{0.975, df}`` comes from a table for ``df = 1..30`` (the
values of any statistics textbook, to four decimals) and, beyond it, from the normal quantile with
the Cornish-Fisher expansion of the t distribution (Abramowitz & Stegun 26.7.5), which is within
``1e-4`` of the exact value from ``df = 30`` on and tends to the normal's 1.96 as ``df`` grows.
See docs/experiments.md, "Statistics".
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Stats", "aggregate", "seed_bands", "stats", "t_quantile_975", "tail_means"]

#: ``t_{0.975, df}`` for ``df = 1..30`` (index ``df - 1``).
T_975: tuple[float, ...] = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)
#: The standard normal's 0.975 quantile.
Z_975 = 1.959963984540054


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (two-sided 95% intervals).

    Args:
        df: Degrees of freedom, ``>= 1`` (``n - 1`` for ``n`` seeds).

    Returns:
        ``t_{0.975, df}``: the table value for ``df <= 30``, else the Cornish-Fisher expansion around
        the normal quantile ``z``: ``z + g1/df + g2/df^2 + g3/df^3`` (Abramowitz & Stegun 26.7.5).

    Raises:
        ValueError: If ``df < 1``.

    Example:
        >>> t_quantile_975(2), round(t_quantile_975(120), 3)
        (4.3027, 1.98)
    """
    if df < 1:
        raise ValueError(f"df must be >= 1; got {df}")
    if df <= len(T_975):
        return T_975[df - 1]
    z = Z_975
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


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
