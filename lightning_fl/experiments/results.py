"""What the runs of an experiment wrote, gathered across seeds: long tables and the final summary.

* :func:`history_rows`: every evaluation of every run (``fairness_history.csv``) as long-format rows
  ``(run, method, seed, round, stage, metric, value)``; :func:`write_long_csv` / :func:`read_long_csv`.
* :func:`summarize`: per method and metric, the final evaluation on one split (the test split for the
  report) as :class:`~lightning_fl.experiments.stats.Stats` across seeds (mean, sample std, 95% t CI);
  :func:`summary_markdown` and :func:`summary_csv` write it.
* :func:`final_client_accuracies`: each run's per-client accuracies at its final evaluation
  (``client_accuracy.csv``), pooled over seeds per method.
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from lightning_fl.experiments.runs import Run
from lightning_fl.experiments.stats import Stats, stats
from lightning_fl.faults.validation import ConfigError

__all__ = ["LONG_HEADER", "final_client_accuracies", "final_client_accuracy", "interval_text", "pick_subset", "history_rows", "read_long_csv", "summarize",
           "metric_unit", "summary_csv", "summary_markdown", "table_columns", "write_long_csv"]

#: Columns of the long-format CSV of every evaluation.
LONG_HEADER = ("run", "method", "seed", "round", "stage", "metric", "value")
#: One long-format row.
Row = tuple[str, str, int, int, str, str, float]
#: Markdown columns of the summary, FedFa Table 2's (``summary.csv`` has every metric):
#: metric -> (header, scale: accuracies in percent, the variance already in percent^2).
MARKDOWN_COLUMNS: dict[str, tuple[str, float]] = {
    "acc_mean": ("Average (%)", 100.0), "acc_worst20": ("Worst 20% (%)", 100.0), "acc_best20": ("Best 20% (%)", 100.0),
    "acc_var": ("Variance", 1.0),
}


def metric_unit(metric: str) -> str:
    """The unit of a fairness metric's raw value (``summary.csv``'s ``unit`` column).

    Example:
        >>> [metric_unit(m) for m in ("acc_mean", "acc_var", "acc_std", "jain", "loss", "round")]
        ['fraction', 'percent^2', 'percent', 'fraction', 'nats', 'rounds']
        >>> [metric_unit(m) for m in ("win_rate", "gap_pooled", "min_gain")]
        ['fraction', 'fraction difference', 'fraction difference']
    """
    if metric.startswith("gap_") or metric.endswith("_gain"):
        return "fraction difference"  # the participation gap and the gain over Local (docs/personalization.md)
    if metric.startswith("acc_var"):
        return "percent^2"  # FedFa Table 2's variance of accuracies in percent (docs/algorithms.md)
    if metric.startswith("acc_std"):
        return "percent"
    if metric.startswith(("acc_", "jain", "win_rate")):
        return "fraction"
    return {"loss": "nats", "round": "rounds"}.get(metric, "")


#: What each metric can take (raw units): a 95% interval is clipped to it in the markdown tables.
def _metric_range(metric: str) -> tuple[float, float]:
    unit = metric_unit(metric)
    if unit == "fraction difference":  # a difference of two accuracies: negative when the method does worse
        return -1.0, 1.0
    return (0.0, 1.0) if unit == "fraction" else (0.0, math.inf) if unit else (-math.inf, math.inf)


def history_rows(run: Run) -> list[Row]:
    """Long rows of ``run``'s ``fairness_history.csv`` (every evaluation, both splits, every metric)."""
    rows = []
    with open(run.log_dir / "fairness_history.csv") as f:
        for record in csv.DictReader(f):
            stage, round_number = record.pop("stage"), int(record.pop("round"))
            rows += [(run.name, run.method, run.seed, round_number, stage, metric, float(value))
                     for metric, value in record.items()]
    return rows


def write_long_csv(rows: Iterable[Row], path: Path) -> None:
    """Write long rows under :data:`LONG_HEADER` (values as ``repr``: they read back exactly)."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(LONG_HEADER)
        writer.writerows((*row[:-1], repr(row[-1])) for row in rows)


def read_long_csv(path: Path) -> list[Row]:
    """The rows of a CSV written by :func:`write_long_csv` (or by hand, with the same header)."""
    with open(path, newline="") as f:
        return [(r["run"], r["method"], int(r["seed"]), int(r["round"]), r["stage"], r["metric"], float(r["value"]))
                for r in csv.DictReader(f)]


def final_rows(rows: Iterable[Row], stage: str) -> dict[str, dict[str, float]]:
    """``{run: {metric: value}}`` at each run's last evaluation of ``stage``, plus its ``round``."""
    last: dict[str, int] = {}
    rows = [row for row in rows if row[4] == stage]
    for run, _method, _seed, round_number, *_ in rows:
        last[run] = max(round_number, last.get(run, round_number))
    final: dict[str, dict[str, float]] = defaultdict(dict)
    for run, _method, _seed, round_number, _stage, metric, value in rows:
        if round_number == last[run]:
            final[run][metric] = value
            final[run]["round"] = float(round_number)
    return dict(final)


def summarize(rows: Sequence[Row], stage: str = "test") -> dict[tuple[str, str], Stats]:
    """``{(method, metric): Stats across seeds}`` of every run's last evaluation of ``stage``.

    ``metric`` ``"round"`` gives the final rounds themselves (equal for runs of the same length).
    Methods keep their order of appearance in ``rows``.
    """
    method_of = {row[0]: row[1] for row in rows}
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    for run, metrics in final_rows(rows, stage).items():
        for metric, value in metrics.items():
            values[(method_of[run], metric)].append(value)
    order = list(dict.fromkeys(row[1] for row in rows))
    return {key: stats(values[key]) for key in sorted(values, key=lambda k: (order.index(k[0]), k[1]))}


def _cell(s: Stats | None, scale: float, metric: str = "") -> str:
    if s is None:
        return "n/a"
    low, high = _metric_range(metric)
    # A t interval over few seeds can pass what the metric can take (an accuracy above 100%): clipped.
    ci = "" if math.isnan(s.ci) else \
        f" [{scale * max(s.ci_low, low):.2f}, {scale * min(s.ci_high, high):.2f}]"
    return f"{scale * s.mean:.2f} ± {scale * s.std:.2f}{ci}"


def table_columns(summary: Mapping[tuple[str, str], Stats]) -> dict[str, tuple[str, float]]:
    """The summary table's columns: FedFa Table 2's accuracy columns, or those of the runs' declared metric.

    Runs of a module judged by its own metric (``FairnessMetrics.fairness_metric``, e.g. ``mse``) have no
    accuracy; their table shows that metric's average, worst and best 20% and variance, in its own units.

    Example:
        >>> s = summarize([("A/seed_0", "A", 0, 5, "test", "mse_mean", 0.5),
        ...                ("A/seed_0", "A", 0, 5, "test", "mse_worst20", 0.9)])
        >>> list(table_columns(s).values())[0]
        ('Average mse', 1.0)
    """
    metrics = {metric for _, metric in summary}
    if "acc_mean" in metrics:
        return dict(MARKDOWN_COLUMNS)
    declared = sorted(m[: -len("_mean")] for m in metrics if m.endswith("_mean") and f"{m[:-5]}_worst20" in metrics)
    if not declared:
        return dict(MARKDOWN_COLUMNS)
    name = declared[0]
    return {f"{name}_mean": (f"Average {name}", 1.0), f"{name}_worst20": (f"Worst 20% {name}", 1.0),
            f"{name}_best20": (f"Best 20% {name}", 1.0), f"{name}_var": (f"Variance of {name}", 1.0)}


def summary_markdown(summary: Mapping[tuple[str, str], Stats],
                     columns: Mapping[str, tuple[str, float]] | None = None) -> str:
    """Methods x metrics table of ``mean ± std [95% CI]`` across seeds, with the number of seeds.

    Intervals are clipped to what the metric can take (accuracies to [0, 100]%, the variance at 0).
    ``columns``: metric -> (header, scale); ``None``: :func:`table_columns`.

    Example:
        >>> s = summarize([("A/seed_0", "A", 0, 5, "test", "acc_mean", 0.5),
        ...                ("A/seed_1", "A", 1, 5, "test", "acc_mean", 0.7)])
        >>> print(summary_markdown(s, {"acc_mean": ("Average (%)", 100.0)}), end="")
        | Method | Seeds | Round | Average (%) |
        | :--- | ---: | ---: | ---: |
        | A | 2 | 5 | 60.00 ± 14.14 [0.00, 100.00] |
    """
    columns = table_columns(summary) if columns is None else columns
    methods = list(dict.fromkeys(method for method, _ in summary))
    lines = ["| Method | Seeds | Round | " + " | ".join(header for header, _ in columns.values()) + " |",
             "| :--- |" + " ---: |" * (len(columns) + 2)]
    for method in methods:
        rounds = summary[(method, "round")]
        round_text = f"{rounds.mean:.0f}" if rounds.min == rounds.max else f"{rounds.min:.0f}-{rounds.max:.0f}"
        cells = [_cell(summary.get((method, metric)), scale, metric) for metric, (_, scale) in columns.items()]
        lines.append(f"| {method.replace('|', chr(92) + '|')} | {rounds.n} | {round_text} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def summary_csv(summary: Mapping[tuple[str, str], Stats]) -> str:
    """One line per method and metric: its ``unit``, ``n, mean, std, ci95_low, ci95_high, min, max`` (raw values,
    unclipped; :func:`metric_unit`: accuracies are fractions, the variance in percent^2).

    Example:
        >>> s = summarize([("A/seed_0", "A", 0, 5, "test", "acc_mean", 0.5)])
        >>> print(summary_csv(s), end="")
        method,metric,unit,n,mean,std,ci95_low,ci95_high,min,max
        A,acc_mean,fraction,1,0.5,0.0,,,0.5,0.5
        A,round,rounds,1,5.0,0.0,,,5.0,5.0
    """
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(("method", "metric", "unit", "n", "mean", "std", "ci95_low", "ci95_high", "min", "max"))
    for (method, metric), s in summary.items():
        low, high = ("", "") if math.isnan(s.ci) else (repr(s.ci_low), repr(s.ci_high))
        writer.writerow((method, metric, metric_unit(metric), s.n, repr(s.mean), repr(s.std), low, high, repr(s.min),
                         repr(s.max)))
    return buf.getvalue()


def final_client_accuracy(run: Run, stage: str = "test") -> dict[int, float]:
    """``{client: accuracy}`` at ``run``'s last evaluation of ``stage`` (clients with samples in the split);
    empty when the run wrote no ``client_accuracy.csv`` or no row of ``stage``."""
    path = run.log_dir / "client_accuracy.csv"
    if not path.exists():
        return {}
    with open(path) as f:
        records = [r for r in csv.DictReader(f) if r["stage"] == stage and float(r["samples"]) > 0]
    if not records:
        return {}
    last = max(int(r["round"]) for r in records)
    return {int(r["client"]): float(r["accuracy"]) for r in records if int(r["round"]) == last}


def final_client_accuracies(runs: Iterable[Run], stage: str = "test") -> dict[str, list[float]]:
    """``{method: client accuracies}`` at each run's last evaluation of ``stage``, pooled over seeds.

    Reads every run's ``client_accuracy.csv``; clients without samples in the split are left out.
    """
    pooled: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        accuracies = final_client_accuracy(run, stage)
        if accuracies:
            pooled[run.method] += list(accuracies.values())
    return dict(pooled)


def interval_text(s: Stats | None, scale: float = 100.0) -> str:
    """``mean [low, high]`` of a 95% interval, scaled and to one decimal (``–`` for none; no interval for one seed)."""
    if s is None:
        return "–"
    interval = "" if s.n < 2 else f" [{(s.mean - s.ci) * scale:.1f}, {(s.mean + s.ci) * scale:.1f}]"
    return f"{s.mean * scale:.1f}{interval}"


def pick_subset(name: str, text: str, choices: Sequence[str]) -> list[str]:
    """The comma-separated ``text`` of option ``--<name>`` as a list, each one of ``choices``.

    Raises:
        ConfigError: For an empty list or an item outside ``choices``.
    """
    picked = [c for c in text.split(",") if c]
    if not picked or any(c not in choices for c in picked):
        raise ConfigError(f"--{name} must list some of {', '.join(choices)}; got {text!r}")
    return picked
