"""The final fairness table in the layout of FedFa Table 2, as Markdown and CSV (reporting, not math)."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping

__all__ = ["fairness_csv", "fairness_table"]

#: Column headers of the FedFa Table 2 layout used by :func:`fairness_table` / :func:`fairness_csv`.
_TABLE_COLUMNS: tuple[str, ...] = ("Method", "Average", "Worst 20%", "Best 20%", "Variance")
#: Metric key behind each numeric column of the table.
_TABLE_KEYS: tuple[str, ...] = ("acc_mean", "acc_worst20", "acc_best20", "acc_var")


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


def fairness_csv(rows: Mapping[str, Mapping[str, float]]) -> str:
    """CSV version of :func:`fairness_table` with raw values at full precision (docs/algorithms.md, Fairness metrics).

    Same columns (``Method,Average,Worst 20%,Best 20%,Variance``) but the numbers are the raw
    metric values, unscaled and unrounded (``repr`` of the float, which round-trips exactly):
    Average / Worst 20% / Best 20% are **fractions** in ``[0, 1]`` (``acc_mean``,
    ``acc_worst20``, ``acc_best20``) and Variance is ``acc_var`` in percent^2.

    Args:
        rows: Maps a method/run name to a metrics dict from :func:`fairness_metrics`.

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
    writer.writerow(_TABLE_COLUMNS)
    for name, metrics in rows.items():
        writer.writerow([str(name), *(repr(v) for v in _row_values(name, metrics))])
    return buf.getvalue()
