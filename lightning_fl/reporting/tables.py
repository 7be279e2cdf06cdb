"""The final fairness table in the layout of FedFa Table 2, as Markdown and CSV (reporting, not math)."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence

__all__ = ["LAST_ROUNDS_COLUMNS", "direction_note", "fairness_csv", "fairness_table", "last_rounds_note", "metric_csv",
           "metric_table"]

#: Column headers of the FedFa Table 2 layout used by :func:`fairness_table` / :func:`fairness_csv`.
_TABLE_COLUMNS: tuple[str, ...] = ("Method", "Average", "Worst 20%", "Best 20%", "Variance")
#: Metric key behind each numeric column of the table.
_TABLE_KEYS: tuple[str, ...] = ("acc_mean", "acc_worst20", "acc_best20", "acc_var")
#: IGFL's paper metric as extra CSV columns of a ``fit`` summary: header -> metric key (fractions).
LAST_ROUNDS_COLUMNS: tuple[tuple[str, str], ...] = (
    ("Average (last 10% of rounds)", "acc_mean_last10pct"),
    ("Pooled (last 10% of rounds)", "acc_pooled_last10pct"),
)


def _row_values(name: str, metrics: Mapping[str, float]) -> tuple[float, ...]:
    missing = [k for k in _TABLE_KEYS if k not in metrics]
    if missing:
        raise KeyError(f"metrics for {name!r} lack keys {missing}")
    return tuple(float(metrics[k]) for k in _TABLE_KEYS)


def fairness_table(rows: Mapping[str, Mapping[str, float]]) -> str:
    """Markdown table in the layout of FedFa Table 2 (docs/algorithms.md, Fairness metrics).

    Columns ``Method | Average | Worst 20% | Best 20% | Variance``: Average / Worst 20% /
    Best 20% are ``acc_mean`` / ``acc_worst20`` / ``acc_best20`` shown as percentages with two
    decimals and a ``%`` sign (``0.8911 -> 89.11%``); Variance is ``acc_var`` (already in
    percent^2) with two decimals. Rows keep the insertion order of ``rows``; a ``|`` in a method
    name is escaped. Numeric columns are right-aligned.

    Args:
        rows: Maps a method/run name to a metrics dict from :func:`fairness_metrics` (extra keys
            are ignored).

    Returns:
        The table as a string, one line per row, ending with a newline.

    Raises:
        KeyError: If a metrics dict lacks ``acc_mean``, ``acc_worst20``, ``acc_best20`` or
            ``acc_var``.

    Example:
        >>> print(fairness_table({"FedAvg": {"acc_mean": 0.8911, "acc_worst20": 0.7817,
        ...                                  "acc_best20": 1.0, "acc_var": 68.04}}), end="")
        | Method | Average | Worst 20% | Best 20% | Variance |
        | :--- | ---: | ---: | ---: | ---: |
        | FedAvg | 89.11% | 78.17% | 100.00% | 68.04 |
    """
    lines = [
        "| " + " | ".join(_TABLE_COLUMNS) + " |",
        "| :--- | " + " | ".join("---:" for _ in _TABLE_COLUMNS[1:]) + " |",
    ]
    for name, metrics in rows.items():
        mean, worst, best, var = _row_values(name, metrics)
        cells = [
            str(name).replace("|", "\\|"),
            f"{100.0 * mean:.2f}%",
            f"{100.0 * worst:.2f}%",
            f"{100.0 * best:.2f}%",
            f"{var:.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def fairness_csv(rows: Mapping[str, Mapping[str, float]],
                 extra_columns: Sequence[tuple[str, str]] = ()) -> str:
    """CSV version of :func:`fairness_table` with raw values at full precision (docs/algorithms.md, Fairness metrics).

    Same columns (``Method,Average,Worst 20%,Best 20%,Variance``) but the numbers are the raw
    metric values, unscaled and unrounded (``repr`` of the float, which round-trips exactly):
    Average / Worst 20% / Best 20% are **fractions** in ``[0, 1]`` (``acc_mean``,
    ``acc_worst20``, ``acc_best20``) and Variance is ``acc_var`` in percent^2. ``extra_columns``
    follow them (e.g. :data:`LAST_ROUNDS_COLUMNS`, IGFL's metric after ``fit``).

    Args:
        rows: Maps a method/run name to a metrics dict from :func:`fairness_metrics`.
        extra_columns: ``(header, metric key)`` pairs appended after Variance, raw values too.

    Returns:
        CSV text with a header line, ``\\n`` line endings and a trailing newline.

    Raises:
        KeyError: If a metrics dict lacks one of the table's keys.

    Example:
        >>> print(fairness_csv({"FedAvg": {"acc_mean": 0.5, "acc_worst20": 0.1,
        ...                                "acc_best20": 0.9, "acc_var": 800.0}}), end="")
        Method,Average,Worst 20%,Best 20%,Variance
        FedAvg,0.5,0.1,0.9,800.0
    """
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*_TABLE_COLUMNS, *(header for header, _ in extra_columns)])
    for name, metrics in rows.items():
        extra = [repr(float(metrics[key])) for _, key in extra_columns]
        writer.writerow([str(name), *(repr(v) for v in _row_values(name, metrics)), *extra])
    return buf.getvalue()


def last_rounds_note(metrics: Mapping[str, float], window: int, rounds: Sequence[int]) -> str:
    """One Markdown line for IGFL's "test accuracy averaged over the last 10% of rounds" (docs/algorithms.md, Paper metrics).

    Args:
        metrics: ``acc_mean_last10pct`` and ``acc_pooled_last10pct`` (fractions).
        window: ``ceil(0.1 * max_epochs)``, the rounds at the end of the run the metric covers.
        rounds: The evaluated rounds among them, which the mean averages.

    Returns:
        The line, ending with a newline.

    Example:
        >>> print(last_rounds_note({"acc_mean_last10pct": 0.7123, "acc_pooled_last10pct": 0.72}, 3, [28, 30]), end="")
        Last 10% of rounds (IGFL's metric; the last 3 rounds, evaluated at rounds 28, 30): Average 71.23%, Pooled 72.00%.
    """
    evaluated = ", ".join(str(r) for r in rounds)
    return (f"Last 10% of rounds (IGFL's metric; the last {window} round{'s' if window != 1 else ''}, evaluated at"
            f" round{'s' if len(rounds) != 1 else ''} {evaluated}): Average {100.0 * metrics['acc_mean_last10pct']:.2f}%,"
            f" Pooled {100.0 * metrics['acc_pooled_last10pct']:.2f}%.\n")


def direction_note(metric: str, higher_is_better: bool) -> str:
    """The line that names the table's metric and direction (what Worst 20% and Best 20% mean).

    Example:
        >>> direction_note("mse", False)
        'Per-client mse, lower is better: Worst 20% is the mean of the highest 20% of clients, Best 20% of the lowest.'
    """
    worst, best = ("lowest", "highest") if higher_is_better else ("highest", "lowest")
    return (f"Per-client {metric}, {'higher' if higher_is_better else 'lower'} is better: Worst 20% is the mean of the"
            f" {worst} 20% of clients, Best 20% of the {best}.")


def _metric_values(name: str, metrics: Mapping[str, float], metric: str) -> tuple[float, ...]:
    keys = [f"{metric}_{key}" for key in ("mean", "worst20", "best20", "var")]
    missing = [k for k in keys if k not in metrics]
    if missing:
        raise KeyError(f"metrics for {name!r} lack keys {missing}")
    return tuple(float(metrics[k]) for k in keys)


def metric_table(rows: Mapping[str, Mapping[str, float]], metric: str, higher_is_better: bool) -> str:
    """:func:`fairness_table` over a declared per-client metric (``FairnessMetrics.fairness_metric``).

    The numbers are the metric's own (4 significant digits, no ``%``: an MSE is not a fraction) from
    the keys ``<metric>_mean``, ``_worst20``, ``_best20`` and ``_var`` (variance in the metric's units
    squared); the header names the metric and its direction.

    Example:
        >>> print(metric_table({"FedAvg": {"mse_mean": 0.5, "mse_worst20": 1.25, "mse_best20": 0.125,
        ...                                "mse_var": 0.0625}}, "mse", False), end="")
        | Method | Average mse (lower is better) | Worst 20% | Best 20% | Variance |
        | :--- | ---: | ---: | ---: | ---: |
        | FedAvg | 0.5 | 1.25 | 0.125 | 0.0625 |
    """
    direction = "higher" if higher_is_better else "lower"
    columns = ("Method", f"Average {metric} ({direction} is better)", *_TABLE_COLUMNS[2:])
    lines = ["| " + " | ".join(columns) + " |", "| :--- | " + " | ".join("---:" for _ in columns[1:]) + " |"]
    for name, metrics in rows.items():
        cells = [str(name).replace("|", "\\|"), *(f"{v:.4g}" for v in _metric_values(name, metrics, metric))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def metric_csv(rows: Mapping[str, Mapping[str, float]], metric: str, higher_is_better: bool) -> str:
    """:func:`metric_table` as CSV at full precision, with the metric and direction as columns.

    Example:
        >>> print(metric_csv({"FedAvg": {"mse_mean": 0.5, "mse_worst20": 1.25, "mse_best20": 0.125,
        ...                              "mse_var": 0.0625}}, "mse", False), end="")
        Method,Metric,Higher is better,Average,Worst 20%,Best 20%,Variance
        FedAvg,mse,False,0.5,1.25,0.125,0.0625
    """
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([_TABLE_COLUMNS[0], "Metric", "Higher is better", *_TABLE_COLUMNS[1:]])
    for name, metrics in rows.items():
        writer.writerow([str(name), metric, higher_is_better,
                         *(repr(v) for v in _metric_values(name, metrics, metric))])
    return buf.getvalue()
