"""Metrics of the personalized evaluation protocol (docs/personalization.md, Evaluation protocol).

Pure, torchmetrics-functional style helpers over per-client test counts and accuracies, the
twins of :mod:`lightning_fl.functional.fairness` for a declared client set ``C``:

* :func:`set_fairness`: the fairness statistics (docs/algorithms.md, Fairness metrics) over the
  clients of ``C`` only;
* :func:`gap_metrics` / :func:`participation_gap`: ``A(unseen) - A(participated)`` (pFL-Bench);
* :func:`gain_over_local`: per-client gains over a Local run with the same partition;
* :func:`select_rounds`: which evaluation(s) the reported test numbers come from (``last``,
  ``mean_last``, ``best_val``); :func:`optimistic_max_test` is the paper-compatibility
  best-on-test number, kept apart so that no honest rule can read the test split to select.

Nothing here holds state or logs anything; accuracies are fractions in ``[0, 1]``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from lightning_fl.functional.fairness import fairness_metrics

__all__ = [
    "HEADLINE_KEYS",
    "ROUND_RULES",
    "gain_over_local",
    "gap_metrics",
    "member_mask",
    "optimistic_max_test",
    "participation_gap",
    "select_rounds",
    "set_fairness",
]

#: ``rounds`` rules of the protocol: which evaluations the reported test numbers come from.
ROUND_RULES: tuple[str, ...] = ("last", "mean_last", "best_val")
#: The :func:`set_fairness` key of each ``weighting``: ``client_mean`` is ``(1/|C|) sum_k acc_k``,
#: ``pooled`` is ``sum_k correct_k / sum_k m_k``.
HEADLINE_KEYS: dict[str, str] = {"client_mean": "acc_mean", "pooled": "acc_pooled"}


def _as_mask(members: Tensor, n: int, name: str = "members") -> Tensor:
    mask = torch.as_tensor(members).detach().cpu()
    if mask.dtype != torch.bool or mask.shape != (n,):
        raise ValueError(f"{name} must be a ({n},) bool tensor (one entry per client), got "
                         f"{mask.dtype} of shape {tuple(mask.shape)}")
    return mask


def member_mask(client_ids: Tensor | Sequence[int], num_clients: int) -> Tensor:
    """The ``(num_clients,)`` bool mask of a set of client ids (e.g. the unseen clients).

    Example:
        >>> member_mask(torch.tensor([0, 3]), 5)
        tensor([ True, False, False,  True, False])
    """
    ids = torch.as_tensor(client_ids, dtype=torch.long).flatten()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_clients):
        raise ValueError(f"client ids must lie in [0, {num_clients}), got {ids.tolist()}")
    mask = torch.zeros(num_clients, dtype=torch.bool)
    mask[ids] = True
    return mask


def set_fairness(correct: Tensor, total: Tensor, members: Tensor) -> dict[str, float]:
    """The fairness statistics over the clients of a declared set ``C`` (docs/algorithms.md, Fairness metrics).

    This is :func:`~lightning_fl.functional.fairness.fairness_metrics` restricted to ``members``:
    its definitions are the protocol's (unweighted over clients; worst and best 20% over
    ``ceil(0.2 |C|)`` clients; population variance in percent^2; Jain's index
    ``(sum a)^2 / (|C| sum a^2)``). Members without test samples are excluded from the unweighted
    statistics and weigh 0 in the pooled one, as there; ``|C|`` counts the members with samples.
    The headline of each ``weighting`` is under :data:`HEADLINE_KEYS` (``acc_mean``, ``acc_pooled``).

    Args:
        correct: ``(N,)`` correct test predictions per client.
        total: ``(N,)`` test samples per client.
        members: ``(N,)`` bool, the clients of ``C``.

    Returns:
        The dict of :data:`~lightning_fl.functional.fairness.FAIRNESS_KEYS`, Python floats.

    Raises:
        ValueError: On malformed inputs, or if no member has a test sample.

    Example:
        >>> m = set_fairness(torch.tensor([1, 10, 9, 0]), torch.tensor([10, 20, 10, 5]),
        ...                  torch.tensor([True, True, True, False]))
        >>> m["acc_mean"], m["acc_pooled"], m["acc_worst20"]
        (0.5, 0.5, 0.1)
    """
    correct_t, total_t = torch.as_tensor(correct), torch.as_tensor(total)
    mask = _as_mask(members, correct_t.numel())
    if correct_t.ndim != 1 or correct_t.shape != total_t.shape:
        raise ValueError(f"correct and total must be 1-D of the same length, got shapes "
                         f"{tuple(correct_t.shape)} and {tuple(total_t.shape)}")
    if not bool(mask.any()):
        raise ValueError("the client set is empty; its statistics are undefined")
    return fairness_metrics(correct_t[mask], total_t[mask])


def participation_gap(acc_unseen: float, acc_participated: float) -> float:
    """``A(unseen) - A(participated)`` (pFL-Bench): negative when clients never trained on do worse."""
    return float(acc_unseen) - float(acc_participated)


def gap_metrics(correct: Tensor, total: Tensor, participated: Tensor, unseen: Tensor) -> dict[str, float]:
    """The participation gap in both weightings, from one evaluation of one model kind.

    Args:
        correct: ``(N,)`` correct test predictions per client, all from the same round and model kind.
        total: ``(N,)`` test samples per client.
        participated: ``(N,)`` bool, clients with at least one completed participation.
        unseen: ``(N,)`` bool, the held-out clients (disjoint from ``participated``).

    Returns:
        ``{"gap_client_mean", "gap_pooled"}``: ``A(unseen) - A(participated)`` with ``A`` the
        client mean and the pooled accuracy.

    Raises:
        ValueError: If the sets overlap or either has no test sample.

    Example:
        >>> gap_metrics(torch.tensor([3, 1, 1]), torch.tensor([4, 4, 4]),
        ...             torch.tensor([True, True, False]), torch.tensor([False, False, True]))
        {'gap_client_mean': -0.25, 'gap_pooled': -0.25}
    """
    n = torch.as_tensor(correct).numel()
    if bool((_as_mask(participated, n, "participated") & _as_mask(unseen, n, "unseen")).any()):
        raise ValueError("the participated and unseen client sets overlap; unseen clients are never trained")
    seen_stats = set_fairness(correct, total, participated)
    unseen_stats = set_fairness(correct, total, unseen)
    return {
        f"gap_{weighting}": participation_gap(unseen_stats[key], seen_stats[key])
        for weighting, key in HEADLINE_KEYS.items()
    }


def gain_over_local(acc_method: Tensor, acc_local: Tensor, members: Tensor) -> dict[str, float]:
    """Per-client gain ``g_k = acc_k(method) - acc_k(Local)`` over the clients of ``C``.

    Both runs must share the seed, partition, splits, unseen set and cohorts, so a client without
    test samples is ``NaN`` in both; such clients are left out (as in :func:`set_fairness`).

    Args:
        acc_method: ``(N,)`` client accuracies of the method (fractions; ``NaN``: no test samples).
        acc_local: ``(N,)`` client accuracies of the Local run.
        members: ``(N,)`` bool, the clients of ``C``.

    Returns:
        ``win_rate = |{k : g_k > 0}| / |C|`` (a tie is not a win), ``mean_gain`` and ``min_gain``.

    Raises:
        ValueError: If the shapes differ, a client has an accuracy in one run only, or no member
            has an accuracy.

    Example:
        >>> gain_over_local(torch.tensor([0.75, 0.5, 0.5]), torch.tensor([0.5, 0.5, 0.75]),
        ...                 torch.tensor([True, True, True]))
        {'win_rate': 0.3333333333333333, 'mean_gain': 0.0, 'min_gain': -0.25}
    """
    method = torch.as_tensor(acc_method, dtype=torch.float64).detach().cpu()
    local = torch.as_tensor(acc_local, dtype=torch.float64).detach().cpu()
    if method.ndim != 1 or method.shape != local.shape:
        raise ValueError(f"acc_method and acc_local must be 1-D of the same length, got shapes "
                         f"{tuple(method.shape)} and {tuple(local.shape)}")
    mask = _as_mask(members, method.numel())
    one_sided = torch.nonzero(mask & (method.isnan() != local.isnan())).flatten().tolist()
    if one_sided:
        raise ValueError(f"clients {one_sided} have an accuracy in one run only; the runs must share the splits")
    mask = mask & ~method.isnan()
    if not bool(mask.any()):
        raise ValueError("no client of the set has an accuracy; the gain is undefined")
    gain = method[mask] - local[mask]
    return {
        "win_rate": float((gain > 0).double().mean()),
        "mean_gain": float(gain.mean()),
        "min_gain": float(gain.min()),
    }


def _evaluation_rounds(history: Sequence[Mapping[str, Any]]) -> list[int]:
    if not history:
        raise ValueError("the evaluation history is empty")
    return [int(entry["round"]) for entry in history]


def _first_argmax(history: Sequence[Mapping[str, Any]], split: str, monitor: str, higher_is_better: bool = True) -> int:
    """Index of the first evaluation with the best ``history[i][split][monitor]``: the largest, or the
    smallest where lower is better (NaN never wins)."""
    best, best_value = None, -math.inf
    for i, entry in enumerate(history):
        if monitor not in entry[split]:
            raise ValueError(f"evaluation at round {entry['round']} has no {split}/{monitor}")
        value = float(entry[split][monitor]) * (1.0 if higher_is_better else -1.0)
        if value > best_value:  # strict: a later tie does not move the choice; NaN compares False
            best, best_value = i, value
    if best is None:
        raise ValueError(f"{split}/{monitor} is NaN or -inf at every evaluation")
    return best


def select_rounds(history: Sequence[Mapping[str, Any]], rule: str, last_r: int = 10,
                  monitor: str = "acc_mean", higher_is_better: bool = True) -> tuple[dict[str, float], list[int]]:
    """The test statistics a run reports under a ``rounds`` rule (docs/personalization.md, Evaluation protocol).

    Args:
        history: Every evaluation in order, each ``{"round": t, "val": {name: value}, "test": {name: value}}``.
        rule: ``last`` (the last evaluation), ``mean_last`` (each test statistic averaged over the
            last ``last_r`` evaluations, or all of them when there are fewer) or ``best_val`` (the
            test statistics at ``t*``, the first evaluation that maximises ``val[monitor]``).
        last_r: ``r`` of ``mean_last`` (``>= 1``).
        monitor: The validation statistic ``best_val`` maximises (e.g. ``acc_mean``).
        higher_is_better: ``False``: ``best_val`` minimises ``monitor`` instead (a loss, an MSE).

    Returns:
        ``(test statistics, rounds used)``.

    Raises:
        ValueError: On an unknown rule, an empty history, ``last_r < 1``, evaluations of
            ``mean_last`` with different test statistics, or a missing or all-NaN monitor.

    Example:
        >>> h = [{"round": 1, "val": {"acc_mean": 0.6}, "test": {"acc_mean": 0.5}},
        ...      {"round": 2, "val": {"acc_mean": 0.7}, "test": {"acc_mean": 0.6}},
        ...      {"round": 3, "val": {"acc_mean": 0.7}, "test": {"acc_mean": 0.8}}]
        >>> select_rounds(h, "best_val")
        ({'acc_mean': 0.6}, [2])
        >>> select_rounds(h, "mean_last", last_r=2)
        ({'acc_mean': 0.7}, [2, 3])
    """
    if rule not in ROUND_RULES:
        raise ValueError(f"rule must be one of {', '.join(ROUND_RULES)}; got {rule!r}")
    rounds = _evaluation_rounds(history)
    if rule == "last":
        return {k: float(v) for k, v in history[-1]["test"].items()}, rounds[-1:]
    if rule == "best_val":
        best = _first_argmax(history, "val", monitor, higher_is_better)
        return {k: float(v) for k, v in history[best]["test"].items()}, [rounds[best]]
    if not (isinstance(last_r, int) and last_r >= 1):
        raise ValueError(f"last_r must be an integer >= 1, got {last_r!r}")
    window = history[-last_r:]
    keys = list(window[-1]["test"])
    if any(set(entry["test"]) != set(keys) for entry in window):
        raise ValueError(f"the last {len(window)} evaluations do not log the same test statistics")
    means = {k: float(torch.tensor([float(e["test"][k]) for e in window], dtype=torch.float64).mean()) for k in keys}
    return means, rounds[-len(window):]


def optimistic_max_test(history: Sequence[Mapping[str, Any]], monitor: str = "acc_pooled",
                        higher_is_better: bool = True) -> tuple[dict[str, float], list[int]]:
    """Test statistics at the first evaluation maximising ``test[monitor]``: ``paper_compat: max_test`` only.

    Selecting on the test split makes the number optimistic (it is the maximum of noisy
    estimates), so it is logged apart as ``test_optimistic/*`` and never as ``test/*``; the pFedMe
    code reports this (the pooled best test round of each run).

    Returns:
        ``(test statistics, [round])``.

    Example:
        >>> optimistic_max_test([{"round": 1, "test": {"acc_pooled": 0.7}}, {"round": 2, "test": {"acc_pooled": 0.6}}])
        ({'acc_pooled': 0.7}, [1])
    """
    rounds = _evaluation_rounds(history)
    best = _first_argmax(history, "test", monitor, higher_is_better)
    return {k: float(v) for k, v in history[best]["test"].items()}, [rounds[best]]
