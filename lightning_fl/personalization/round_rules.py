"""The declared ``rounds`` rule applied to a run's evaluations (docs/personalization.md, Which rounds).

A run evaluates many times; its report gives one number per statistic. ``model.eval.rounds`` says
which evaluations that number comes from, and these helpers apply it the same way wherever a report
is made: to the :class:`~lightning_fl.callbacks.fairness_metrics.FairnessMetrics` history at the end of
``fit`` and to the ``fairness_history.csv`` of finished runs in a comparison, so the two never disagree.

* :func:`evaluations`: one ``{"round", "val", "test"}`` entry per evaluation of the test splits (the
  shape :func:`~lightning_fl.functional.personal_metrics.select_rounds` reads), with the participation
  gap of the same round added to the test statistics when unseen clients were scored;
* :func:`reported` and :func:`optimistic`: the declared rule, and ``paper_compat: max_test``;
* :func:`rounds_phrase` and :func:`optimistic_note`: how the table's title and notes say it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lightning_fl.functional.personal_metrics import HEADLINE_KEYS, optimistic_max_test, select_rounds
from lightning_fl.personalization.protocol import EvalProtocol

__all__ = ["OPTIMISTIC_PREFIX", "evaluations", "monitor_of", "optimistic", "optimistic_note", "reported",
           "rounds_phrase"]

#: Where ``paper_compat: max_test`` logs its best-on-test statistics; never ``test/*``.
OPTIMISTIC_PREFIX = "test_optimistic"


def monitor_of(protocol: EvalProtocol, metric: str = "acc") -> str:
    """The statistic ``best_val`` optimises on the validation splits and ``max_test`` on the test splits:
    the headline of the declared ``weighting`` (``acc_mean`` for ``client_mean``, ``acc_pooled`` for ``pooled``);
    for a module's own metric (``FairnessMetrics.fairness_metric``) ``<metric>_mean`` or ``<metric>_weighted``.

    Example:
        >>> monitor_of(EvalProtocol(weighting="pooled")), monitor_of(EvalProtocol(), "mse")
        ('acc_pooled', 'mse_mean')
    """
    if metric == "acc":
        return HEADLINE_KEYS[protocol.weighting]
    return f"{metric}_{'mean' if protocol.weighting == 'client_mean' else 'weighted'}"


def _best(higher_is_better: bool) -> str:
    return "maximising" if higher_is_better else "minimising"


def _numbers(row: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in row.items() if k not in ("stage", "round")}


def evaluations(history: Iterable[Mapping[str, Any]], stage: str = "test") -> list[dict[str, Any]]:
    """The evaluations of ``stage`` in order, each with the validation statistics of the same round.

    Args:
        history: Rows ``{"stage", "round", <statistic>: value, ...}`` in the order they were made:
            :attr:`FairnessMetrics.history <lightning_fl.callbacks.fairness_metrics.FairnessMetrics>` or
            the rows of ``fairness_history.csv`` (values may be strings).
        stage: The reported split (``test``).

    Returns:
        ``[{"round": t, "val": {...}, "test": {...}}]``, one per ``stage`` row; ``val`` is the latest
        ``val`` row of round ``t`` made before it (empty without validation splits). When the unseen
        clients were scored at round ``t`` (``<stage>/unseen``), ``test`` also holds ``gap_client_mean``
        and ``gap_pooled`` (``A(unseen) - A(participated)``, the same round and model kind), so that a
        rule treats the gap like every other statistic.

    Example:
        >>> rows = [{"stage": "val", "round": 1, "acc_mean": 0.5}, {"stage": "test", "round": 1, "acc_mean": 0.75,
        ...          "acc_pooled": 0.5}, {"stage": "test/unseen", "round": 1, "acc_mean": 0.5, "acc_pooled": 0.25}]
        >>> [entry["test"] for entry in evaluations(rows)]
        [{'acc_mean': 0.75, 'acc_pooled': 0.5, 'gap_client_mean': -0.25, 'gap_pooled': -0.25}]
    """
    rows = list(history)
    out, val, unseen = [], {}, {}
    for row in rows:  # first pass: the unseen side evaluation of a round comes after its main one
        if row["stage"] == f"{stage}/unseen":
            unseen[int(row["round"])] = _numbers(row)
    for row in rows:
        t = int(row["round"])
        if row["stage"] == "val":
            val[t] = _numbers(row)
        elif row["stage"] == stage:
            test = _numbers(row)
            if t in unseen:
                test |= {f"gap_{w}": unseen[t][key] - test[key] for w, key in HEADLINE_KEYS.items()}
            out.append({"round": t, "val": val.get(t, {}), "test": test})
    return out


def reported(history: Iterable[Mapping[str, Any]], protocol: EvalProtocol, metric: str = "acc",
             higher_is_better: bool = True) -> tuple[dict[str, float], list[int]]:
    """The test statistics a run reports under ``protocol.rounds``, and the rounds they come from.

    ``last``: the last evaluation; ``mean_last``: each statistic averaged over the last ``last_r``
    evaluations; ``best_val``: the statistics at ``t*``, the first evaluation maximising
    ``val/<monitor_of(protocol, metric)>`` (minimising it where ``higher_is_better`` is ``False``).

    Raises:
        ValueError: Without an evaluation, or (``best_val``) without the monitored validation statistic.
    """
    return select_rounds(evaluations(history), protocol.rounds, protocol.last_r, monitor_of(protocol, metric),
                         higher_is_better)


def optimistic(history: Iterable[Mapping[str, Any]], protocol: EvalProtocol, metric: str = "acc",
               higher_is_better: bool = True) -> tuple[dict[str, float], list[int]]:
    """``paper_compat: max_test``: the test statistics at the first evaluation with the best ``test/<monitor>``.

    Optimistic by construction (the test split chose the round); reported as ``test_optimistic/*`` only.
    """
    return optimistic_max_test(evaluations(history), monitor_of(protocol, metric), higher_is_better)


def _rounds_list(rounds: list[int]) -> str:
    return f"round{'s' if len(rounds) != 1 else ''} {', '.join(map(str, rounds))}"


def rounds_phrase(protocol: EvalProtocol, used: list[int], final_round: int, metric: str = "acc",
                  higher_is_better: bool = True) -> str:
    """How a table's title says which evaluations its numbers come from.

    Example:
        >>> rounds_phrase(EvalProtocol(), [4], 4)
        'after 4 rounds'
        >>> rounds_phrase(EvalProtocol(rounds="mean_last", last_r=2), [3, 4], 4)
        'after 4 rounds, each statistic averaged over the last 2 evaluations (rounds=mean_last(2): rounds 3, 4)'
        >>> rounds_phrase(EvalProtocol(rounds="best_val"), [2], 4)
        'after 4 rounds, taken at round 2 (rounds=best_val: the first evaluation maximising val/acc_mean)'
    """
    after = f"after {final_round} round{'' if final_round == 1 else 's'}"
    if protocol.rounds == "mean_last":
        return (f"{after}, each statistic averaged over the last {len(used)} evaluation{'s' if len(used) != 1 else ''}"
                f" (rounds=mean_last({protocol.last_r}): {_rounds_list(used)})")
    if protocol.rounds == "best_val":
        return (f"{after}, taken at round {used[0]} (rounds=best_val: the first evaluation"
                f" {_best(higher_is_better)} val/{monitor_of(protocol, metric)})")
    return after


def optimistic_note(protocol: EvalProtocol, statistics: Mapping[str, float], used: list[int], metric: str = "acc",
                    higher_is_better: bool = True) -> str:
    """The line under the table for ``paper_compat: max_test``, saying the number is optimistic.

    Example:
        >>> print(optimistic_note(EvalProtocol(paper_compat="max_test", weighting="pooled"),
        ...                       {"acc_mean": 0.8, "acc_pooled": 0.825, "acc_worst20": 0.5}, [7]), end="")
        Optimistic, not a result (paper_compat: max_test; the round was chosen on the test split, the best test/acc_pooled at round 7; logged as test_optimistic/* only): Average 80.00%, Pooled 82.50%, Worst 20% 50.00%.
    """
    if metric == "acc":
        numbers = (f"Average {100 * statistics['acc_mean']:.2f}%, Pooled {100 * statistics['acc_pooled']:.2f}%,"
                   f" Worst 20% {100 * statistics['acc_worst20']:.2f}%")
    else:
        numbers = f"Average {metric} {statistics[f'{metric}_mean']:.4g}, Worst 20% {statistics[f'{metric}_worst20']:.4g}"
    return (f"Optimistic, not a result (paper_compat: max_test; the round was chosen on the test split, the best"
            f" test/{monitor_of(protocol, metric)} at round {used[0]}; logged as {OPTIMISTIC_PREFIX}/* only):"
            f" {numbers}.\n")
