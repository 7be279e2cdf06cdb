"""Fairness and progress metrics over per-client test results (docs/algorithms.md, Fairness metrics).

Pure, torchmetrics-functional style helpers: every function takes plain tensors (or lists) and
returns tensors, Python scalars or strings; nothing here holds state or logs anything.

Conventions (docs/algorithms.md, Fairness metrics, FedFa Information Sciences 2022 Table 2):

* A client's accuracy is ``correct_k / total_k`` on its local test split.
* Clients with **zero test samples** (tiny clients under an 80/20 split) have no accuracy: they
  are ``NaN`` in :func:`client_accuracies`, are **excluded** from every unweighted statistic
  (``acc_mean``, ``acc_worst20``, ``acc_best20``, ``acc_var``, ``acc_std``, ``acc_min``,
  ``acc_max``, ``jain``; ``N`` below counts only clients with test samples) and carry **weight
  zero** in ``acc_weighted`` / ``acc_pooled`` (they add nothing to either sum).
* Accuracies (``acc_mean``, ``acc_weighted``, ``acc_pooled``, ``acc_worst20``, ``acc_best20``,
  ``acc_min``, ``acc_max``) are fractions in ``[0, 1]``; the spread statistics ``acc_var`` and
  ``acc_std`` are in **percent** units (percent^2 and percent), as in FedFa Table 2.
* All arithmetic is done in float64.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

__all__ = [
    "FAIRNESS_KEYS",
    "client_accuracies",
    "fairness_metrics",
    "first_reaching",
    "last_rounds_count",
    "mean_over_last_rounds",
    "tail_count",
]

#: The keys of :func:`fairness_metrics`, in a stable order (docs/algorithms.md, Fairness metrics).
FAIRNESS_KEYS: tuple[str, ...] = (
    "acc_mean",
    "acc_weighted",
    "acc_pooled",
    "acc_worst20",
    "acc_best20",
    "acc_var",
    "acc_std",
    "acc_min",
    "acc_max",
    "jain",
)



def _as_counts(correct: Tensor | Sequence[float], total: Tensor | Sequence[float]) -> tuple[Tensor, Tensor]:
    """Validate ``correct`` / ``total`` and return them as float64 1-D tensors."""
    correct_t = torch.as_tensor(correct).detach().to(device="cpu", dtype=torch.float64)
    total_t = torch.as_tensor(total).detach().to(device="cpu", dtype=torch.float64)
    if correct_t.ndim != 1 or total_t.ndim != 1:
        raise ValueError(
            f"correct and total must be 1-D (one entry per client), got shapes "
            f"{tuple(correct_t.shape)} and {tuple(total_t.shape)}"
        )
    if correct_t.shape != total_t.shape:
        raise ValueError(
            f"correct and total must have the same length, got {correct_t.numel()} and {total_t.numel()}"
        )
    if not (torch.isfinite(correct_t).all() and torch.isfinite(total_t).all()):
        raise ValueError("correct and total must be finite")
    if (correct_t < 0).any() or (total_t < 0).any():
        raise ValueError("correct and total must be non-negative")
    bad = torch.nonzero(correct_t > total_t).flatten().tolist()
    if bad:
        raise ValueError(f"correct exceeds total for clients at positions {bad}")
    return correct_t, total_t


def tail_count(n: int) -> int:
    """Number of clients in a 20% tail: ``ceil(0.2 * n)`` (docs/algorithms.md, Fairness metrics).

    Computed in integer arithmetic as ``(n + 4) // 5``, because the float expression
    ``math.ceil(0.2 * n)`` is wrong for some ``n`` (``0.2 * 15 == 3.0000000000000004``).

    Args:
        n: Number of clients (with test samples).

    Returns:
        ``ceil(n / 5)``; ``0`` for ``n == 0``.

    Raises:
        ValueError: If ``n`` is negative.

    Example:
        >>> [tail_count(n) for n in (1, 5, 6, 7, 15)]
        [1, 1, 2, 2, 3]
    """
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    return (n + 4) // 5


def client_accuracies(correct: Tensor, total: Tensor) -> Tensor:
    """Per-client test accuracy ``correct_k / total_k`` (docs/algorithms.md, Fairness metrics).

    Args:
        correct: ``(N,)`` number of correctly classified test samples per client (int or float).
        total: ``(N,)`` number of test samples per client.

    Returns:
        ``(N,)`` float64 tensor of fractions in ``[0, 1]``; ``NaN`` for clients with
        ``total_k == 0`` (no test samples, hence no accuracy).

    Raises:
        ValueError: If the inputs are not 1-D, differ in length, are negative or non-finite, or
            ``correct_k > total_k`` for some client.

    Example:
        >>> client_accuracies(torch.tensor([1, 0, 3]), torch.tensor([2, 0, 4]))
        tensor([0.5000,    nan, 0.7500], dtype=torch.float64)
    """
    correct_t, total_t = _as_counts(correct, total)
    has_samples = total_t > 0
    safe_total = torch.where(has_samples, total_t, torch.ones_like(total_t))
    return torch.where(has_samples, correct_t / safe_total, torch.full_like(total_t, math.nan))


def fairness_metrics(correct: Tensor, total: Tensor) -> dict[str, float]:
    """Fairness statistics of the client accuracy distribution (docs/algorithms.md, Fairness metrics, FedFa Table 2).

    Let ``a_k = correct_k / total_k`` over the ``N`` clients **with at least one test sample**
    (clients with ``total_k == 0`` are excluded from the unweighted statistics and have weight 0
    in the weighted ones), and ``m = ceil(0.2 N)`` (see :func:`tail_count`).

    * ``acc_mean``: ``mean_k a_k`` (unweighted over clients).
    * ``acc_weighted``: ``sum_k total_k a_k / sum_k total_k`` (weighted by test samples).
    * ``acc_pooled``: ``sum_k correct_k / sum_k total_k``, the accuracy on the union of the test
      sets. It equals ``acc_weighted`` by construction (up to rounding); both are returned because
      the project documents both (docs/algorithms.md, Fairness metrics).
    * ``acc_worst20`` / ``acc_best20``: mean of the ``m`` lowest / highest ``a_k``.
    * ``acc_var``: population variance (divide by ``N``) of ``100 a_k``, in percent^2, as the
      "Variance" column of FedFa Table 2.
    * ``acc_std``: ``sqrt(acc_var)``, population standard deviation in **percent** (same unit
      system as ``acc_var``).
    * ``acc_min`` / ``acc_max``: smallest / largest ``a_k``.
    * ``jain``: Jain's index ``(sum a_k)^2 / (N sum a_k^2)`` in ``[1/N, 1]``. When every
      accuracy is 0 the ratio is 0/0; the distribution is then perfectly equal, so ``jain = 1.0``.

    All accuracies are fractions in ``[0, 1]``; only ``acc_var`` / ``acc_std`` are in percent
    units. Computed in float64.

    Args:
        correct: ``(N_all,)`` correct test predictions per client.
        total: ``(N_all,)`` test samples per client (``0`` allowed).

    Returns:
        Dict with exactly the keys of :data:`FAIRNESS_KEYS`, values as Python floats.

    Raises:
        ValueError: On malformed inputs (see :func:`client_accuracies`), or if no client has a
            test sample (every statistic would be undefined).

    Example:
        >>> m = fairness_metrics(torch.tensor([1, 10, 9, 28, 6]), torch.tensor([10, 20, 10, 40, 20]))
        >>> m["acc_mean"], m["acc_weighted"], m["acc_worst20"], m["acc_var"]
        (0.5, 0.54, 0.1, 800.0)
    """
    correct_t, total_t = _as_counts(correct, total)
    has_samples = total_t > 0
    if not bool(has_samples.any()):
        raise ValueError(
            f"no client has test samples (N={total_t.numel()}); fairness metrics are undefined"
        )
    acc = correct_t[has_samples] / total_t[has_samples]
    n = acc.numel()
    m = tail_count(n)
    ordered = torch.sort(acc).values

    pooled = correct_t.sum() / total_t.sum()
    weighted = (total_t[has_samples] * acc).sum() / total_t[has_samples].sum()

    acc_pct = acc * 100.0
    var_pct = ((acc_pct - acc_pct.mean()) ** 2).mean()

    sum_sq = (acc**2).sum()
    jain = 1.0 if float(sum_sq) == 0.0 else float(acc.sum() ** 2 / (n * sum_sq))

    return {
        "acc_mean": float(acc.mean()),
        "acc_weighted": float(weighted),
        "acc_pooled": float(pooled),
        "acc_worst20": float(ordered[:m].mean()),
        "acc_best20": float(ordered[n - m :].mean()),
        "acc_var": float(var_pct),
        "acc_std": math.sqrt(float(var_pct)),
        "acc_min": float(ordered[0]),
        "acc_max": float(ordered[-1]),
        "jain": jain,
    }


def first_reaching(
    values: Sequence[float] | Tensor,
    target: float,
    mode: Literal["max", "min"] = "max",
) -> int | None:
    """Index of the first value that reaches ``target`` (docs/algorithms.md, Rounds to target).

    With ``mode="max"`` (higher is better, e.g. accuracy) the first ``i`` with
    ``values[i] >= target``; with ``mode="min"`` (lower is better, e.g. loss) the first ``i`` with
    ``values[i] <= target``. ``NaN`` values never reach the target. Mapping the index to a round
    number or wall time (DWFed Table 2, Tempo Table 1) is the caller's job.

    Args:
        values: 1-D sequence of metric values in evaluation order.
        target: Threshold to reach.
        mode: ``"max"`` or ``"min"``.

    Returns:
        The 0-based index of the first value reaching ``target``, or ``None`` if none does
        (including for an empty ``values``).

    Raises:
        ValueError: If ``mode`` is not ``"max"``/``"min"``, ``target`` is NaN, or ``values`` is
            not 1-D.

    Example:
        >>> first_reaching([0.2, 0.5, 0.7, 0.9], 0.7)
        2
        >>> first_reaching([2.0, 1.0, 0.4], 0.5, mode="min")
        2
        >>> first_reaching([0.1, 0.2], 0.5) is None
        True
    """
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    if math.isnan(float(target)):
        raise ValueError("target must not be NaN")
    vals = torch.as_tensor(values, dtype=torch.float64).detach().cpu()
    if vals.ndim != 1:
        raise ValueError(f"values must be 1-D, got shape {tuple(vals.shape)}")
    hit = vals >= target if mode == "max" else vals <= target  # NaN compares False
    idx = torch.nonzero(hit).flatten()
    return int(idx[0]) if idx.numel() else None


def last_rounds_count(num_rounds: int) -> int:
    """Rounds in IGFL's "last 10% of rounds": ``ceil(0.1 * num_rounds)`` (docs/algorithms.md, Paper metrics).

    Computed in integer arithmetic as ``(n + 9) // 10``: the float expression is wrong for some ``n``
    (``0.1 * 30 == 3.0000000000000004``, whose ceiling is 4).

    Args:
        num_rounds: The run's number of rounds (``trainer.max_epochs``), ``>= 1``.

    Returns:
        ``ceil(num_rounds / 10)``.

    Raises:
        ValueError: If ``num_rounds < 1``.

    Example:
        >>> [last_rounds_count(n) for n in (1, 10, 11, 30, 100)]
        [1, 1, 2, 3, 10]
    """
    if num_rounds < 1:
        raise ValueError(f"num_rounds must be >= 1, got {num_rounds}")
    return (num_rounds + 9) // 10


def mean_over_last_rounds(
    rounds: Sequence[int],
    values: Sequence[float],
    last_round: int,
    window: int,
) -> tuple[float, list[int]]:
    """Mean of the values evaluated in the last ``window`` rounds (docs/algorithms.md, Paper metrics).

    Only rounds that were evaluated count: the mean is over the evaluations whose round ``r`` has
    ``last_round - window < r <= last_round``, each round once (a round evaluated twice counts with
    its latest value). IGFL's tables average the test accuracy "over the last 10% rounds" this way
    with ``window = last_rounds_count(num_rounds)``.

    Args:
        rounds: Round number of every evaluation, in evaluation order.
        values: The metric of every evaluation (same length).
        last_round: The final round of the run.
        window: Number of rounds at the end of the run (``>= 1``).

    Returns:
        ``(mean, rounds_used)``: the mean in float64 and the evaluated rounds it averages, ascending.

    Raises:
        ValueError: If the lengths differ, ``window < 1``, or no evaluation falls in the window.

    Example:
        >>> mean_over_last_rounds([2, 4, 6, 8, 10], [0.1, 0.2, 0.3, 0.5, 0.7], last_round=10, window=4)
        (0.6, [8, 10])
    """
    if len(rounds) != len(values):
        raise ValueError(f"rounds and values must have the same length, got {len(rounds)} and {len(values)}")
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    latest = {int(r): float(v) for r, v in zip(rounds, values) if last_round - window < int(r) <= last_round}
    if not latest:
        raise ValueError(f"no evaluation in the last {window} round(s) up to round {last_round}")
    used = sorted(latest)
    mean = float(torch.tensor([latest[r] for r in used], dtype=torch.float64).mean())
    return mean, used
