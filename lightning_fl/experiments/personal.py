"""Personalized comparisons over seeds: headline, worst 20%, participation gap, gain over Local (docs/personalization.md).

A comparison of personalized methods needs more than the fairness table: which ``model.eval`` each run
declared (read back from its ``hparams.yaml``), the statistics under that declaration's ``rounds`` rule
(:mod:`lightning_fl.personalization.round_rules`, as the run's own final table), the participation gap
``A(unseen) - A(participated)`` where unseen clients were held out, and the gain over a Local run with
the same seed (``g_k = acc_k(method) - acc_k(Local)`` per client of ``C``; ``win_rate``, ``mean_gain``,
``min_gain``). Each is one number per seed, summarised as mean, sample std and 95% t interval.

* :func:`run_protocols`: each run's declared protocol (``None`` where it logged none);
* :func:`reported_rows`: the long rows of the final test evaluation replaced by what each run reports;
* :func:`personal_comparison`: the table, when some run evaluates ``model: personal``.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml
from torch import Tensor

from lightning_fl.experiments.results import Row, summary_markdown
from lightning_fl.experiments.runs import Run
from lightning_fl.experiments.stats import Stats, stats
from lightning_fl.functional.personal_metrics import gain_over_local
from lightning_fl.personalization.protocol import EvalProtocol
from lightning_fl.personalization.round_rules import reported

__all__ = ["GAIN_KEYS", "PersonalComparison", "describe_lines", "personal_comparison", "reported_rows",
           "run_protocols"]

#: The gain over Local, per seed (docs/personalization.md, Gain over Local).
GAIN_KEYS = ("win_rate", "mean_gain", "min_gain")
#: Markdown columns: metric -> (header, scale); the gaps and gains in percentage points.
COLUMNS: dict[str, tuple[str, float]] = {
    "acc_mean": ("Client mean (%)", 100.0), "acc_pooled": ("Pooled (%)", 100.0),
    "acc_worst20": ("Worst 20% (%)", 100.0), "gap_client_mean": ("Gap, client mean (pp)", 100.0),
    "gap_pooled": ("Gap, pooled (pp)", 100.0), "win_rate": ("Win rate over Local (%)", 100.0),
    "mean_gain": ("Mean gain over Local (pp)", 100.0), "min_gain": ("Min gain over Local (pp)", 100.0),
}


def _hparams(run: Run) -> dict:
    path = run.log_dir / "hparams.yaml"
    if not path.is_file():
        return {}
    try:
        values = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        return {}
    return values if isinstance(values, dict) else {}


def run_protocols(runs: Sequence[Run]) -> dict[str, tuple[EvalProtocol | None, str]]:
    """``{run name: (declared protocol, algorithm)}`` from each run's ``hparams.yaml``.

    The protocol is ``None`` for a run that logged none (no logger, or older than ``model.eval``);
    the algorithm is the aggregation callback's class name (``Local``), whatever the method is called.
    """
    out = {}
    for run in runs:
        values = _hparams(run)
        try:
            protocol = EvalProtocol.from_hparams(values)
        except (KeyError, TypeError, ValueError):
            protocol = None
        out[run.name] = (protocol, str(values.get("algorithm", "")))
    return out


def _history(run: Run) -> list[dict[str, str]]:
    with open(run.log_dir / "fairness_history.csv") as f:
        return list(csv.DictReader(f))


def reported_rows(rows: Sequence[Row], runs: Sequence[Run],
                  protocols: Mapping[str, tuple[EvalProtocol | None, str]]) -> list[Row]:
    """``rows`` with each run's ``test`` evaluations replaced by its reported statistics under its rounds rule.

    The reported statistics stand at the last round they use, so
    :func:`~lightning_fl.experiments.results.summarize` reads them as the final evaluation. Runs with
    ``rounds: last`` (or no protocol) keep their rows: their report is the last evaluation.
    """
    declared = {run.name: protocols.get(run.name, (None, ""))[0] for run in runs}
    ruled = {run.name: run for run in runs if declared[run.name] is not None and declared[run.name].rounds != "last"}
    if not ruled:
        return list(rows)
    selected = {}
    for name, run in ruled.items():
        try:
            selected[name] = reported(_history(run), declared[name])
        except ValueError:  # best_val with a NaN monitor throughout: the run's own table fell back to the last too
            continue
    out = [row for row in rows if not (row[0] in selected and row[4] == "test")]
    for name, (statistics, used) in selected.items():
        metrics = {row[5] for row in rows if row[0] == name and row[4] == "test"}
        run = ruled[name]
        out += [(name, run.method, run.seed, max(used), "test", metric, value)
                for metric, value in statistics.items() if metric in metrics]
    return out


def _client_accuracies(run: Run, stage: str = "test") -> dict[int, Tensor]:
    """``{round: (N,) float64 accuracies}`` of ``client_accuracy.csv`` (NaN: no sample, or outside ``C``)."""
    by_round: dict[int, dict[int, float]] = defaultdict(dict)
    with open(run.log_dir / "client_accuracy.csv") as f:
        for r in csv.DictReader(f):
            if r["stage"] == stage:
                by_round[int(r["round"])][int(r["client"])] = float(r["accuracy"]) if float(r["samples"]) > 0 \
                    else math.nan
    n = 1 + max((k for clients in by_round.values() for k in clients), default=-1)
    out = {}
    for t, clients in by_round.items():
        acc = torch.full((n,), math.nan, dtype=torch.float64)
        acc[list(clients)] = torch.tensor(list(clients.values()), dtype=torch.float64)
        out[t] = acc
    return out


def _same_for_gain(method: EvalProtocol, local: EvalProtocol) -> str:
    """Why ``method``'s run cannot be compared client by client with ``local``'s ('' when it can)."""
    for name in ("rounds", "unseen_fraction", "effective_clients", *(("last_r",) if method.rounds == "mean_last" else ())):
        if getattr(method, name) != getattr(local, name):
            return f"model.eval.{name.replace('effective_', '')} differs from Local's"
    return ""


def _gain(method: tuple[Run, list[int]], local: tuple[Run, list[int]]) -> dict[str, float]:
    """The gain statistics of one seed: at the paired reported evaluations, averaged like every statistic."""
    (m_run, m_rounds), (l_run, l_rounds) = method, local
    if len(m_rounds) != len(l_rounds):
        raise ValueError(f"{m_run.name} reports {len(m_rounds)} evaluations and {l_run.name} {len(l_rounds)}")
    m_acc, l_acc = _client_accuracies(m_run), _client_accuracies(l_run)
    per = [gain_over_local(m_acc[a], l_acc[b], ~m_acc[a].isnan()) for a, b in zip(m_rounds, l_rounds)]
    return {key: sum(p[key] for p in per) / len(per) for key in GAIN_KEYS}


def _gains(runs: Sequence[Run], reports: Mapping[str, tuple[Run, list[int]]],
           declared: Mapping[str, EvalProtocol | None], local_names: Sequence[str],
           values: dict[tuple[str, str], list[float]], notes: list[str]) -> None:
    """Add each run's gain over the Local run of its seed to ``values`` (or say in ``notes`` why there is none)."""
    local_runs: dict[int, Run] = {}
    for run in runs:  # the first Local method of the comparison is the reference
        if run.name in local_names and run.name in reports:
            local_runs.setdefault(run.seed, run)
    if not local_runs:
        return  # no Local run in the comparison: nothing to compare with, and nothing to say per run
    for run in runs:
        local = local_runs.get(run.seed)
        if run.name not in reports or run.name in local_names:
            continue
        why = "no Local run with this seed" if local is None else _same_for_gain(declared[run.name],
                                                                                 declared[local.name])
        try:
            gain = {} if why else _gain(reports[run.name], reports[local.name])
        except (KeyError, ValueError) as err:  # e.g. a client of C that Local never evaluated
            why = str(err)
        if why:
            notes.append(f"{run.name}: no gain over Local ({why})")
            continue
        for key, value in gain.items():
            values[(run.method, key)].append(value)


@dataclass
class PersonalComparison:
    """What :func:`personal_comparison` found.

    Attributes:
        summary: ``{(method, metric): Stats over seeds}`` of :data:`COLUMNS` and ``round`` (the last
            evaluation each run's report uses).
        describe: The ``model.eval`` lines of the runs (:func:`describe_lines`).
        notes: Why a cell is missing (no Local run of a seed, a protocol unlike Local's, ...).
    """

    summary: dict[tuple[str, str], Stats]
    describe: str
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        """The table with the ``model.eval`` lines above it and the notes below."""
        shown = {metric: column for metric, column in COLUMNS.items()
                 if any(key[1] == metric for key in self.summary)}
        notes = "".join(f"- {note}\n" for note in self.notes)
        return (f"Personalized evaluation (docs/personalization.md): each run's test statistics under its"
                f" model.eval rounds rule; gap = A(unseen) - A(participated); gain over the Local run of the same seed,"
                f" g_k = acc_k(method) - acc_k(Local) on the clients of C; mean ± sample std [95% t interval] over"
                f" seeds.\n\n{self.describe}\n\n{summary_markdown(self.summary, shown)}"
                f"{chr(10) + notes if notes else ''}")


def describe_lines(protocols: Mapping[str, EvalProtocol | None], method_of: Mapping[str, str]) -> str:
    """The ``describe()`` line of the runs' protocol; one line per group of methods when they differ."""
    methods: dict[str, list[str]] = defaultdict(list)
    for name, protocol in protocols.items():
        line = "eval: not recorded" if protocol is None else protocol.describe()
        if method_of[name] not in methods[line]:
            methods[line].append(method_of[name])
    if len(methods) == 1:
        return next(iter(methods))
    return "\n".join(f"{', '.join(names)}: {line}" for line, names in methods.items())


def personal_comparison(runs: Sequence[Run], protocols: Mapping[str, tuple[EvalProtocol | None, str]]
                        ) -> PersonalComparison | None:
    """Headline, worst 20%, gap and gain over Local per method across seeds; ``None`` when no run is personalized.

    Args:
        runs: The finished runs (method x seed).
        protocols: :func:`run_protocols` of ``runs``.
    """
    declared = {run.name: protocols.get(run.name, (None, ""))[0] for run in runs}
    if not any(p is not None and p.model == "personal" for p in declared.values()):
        return None
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    reports: dict[str, tuple[Run, list[int]]] = {}
    notes: list[str] = []
    for run in runs:
        if declared[run.name] is None:
            notes.append(f"{run.name}: no model.eval recorded (hparams.yaml); left out")
            continue
        try:
            statistics, used = reported(_history(run), declared[run.name])
        except ValueError as err:
            notes.append(f"{run.name}: model.eval.rounds {declared[run.name].rounds} could not be applied ({err});"
                         " left out")
            continue
        reports[run.name] = (run, used)
        values[(run.method, "round")].append(float(max(used)))
        for metric in COLUMNS:
            if metric in statistics:
                values[(run.method, metric)].append(statistics[metric])
    _gains(runs, reports, declared, [run.name for run in runs if protocols[run.name][1] == "Local"], values, notes)
    order = list(dict.fromkeys(run.method for run in runs))
    summary = {key: stats(values[key]) for key in sorted(values, key=lambda k: (order.index(k[0]), k[1]))}
    method_of = {run.name: run.method for run in runs}
    return PersonalComparison(summary, describe_lines(declared, method_of), notes)
