"""Fairness statistics over any per-client metric with a direction (docs/algorithms.md, Fairness metrics).

The twin of :func:`lightning_fl.functional.fairness.fairness_metrics` for a metric that is not an
accuracy: a per-client value ``v_k`` (a module's logged ``mse``, ``loss``, ``perplexity``, ...) and
whether higher is better. Pure and stateless, like the rest of :mod:`lightning_fl.functional`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from lightning_fl.functional.fairness import tail_count

__all__ = ["VALUE_FAIRNESS_KEYS", "default_higher_is_better", "value_fairness"]

#: The keys of :func:`value_fairness`, in a stable order.
VALUE_FAIRNESS_KEYS: tuple[str, ...] = ("mean", "weighted", "worst20", "best20", "var", "std", "min", "max", "jain")

#: Name fragments of metrics where lower is better (the default direction of a declared metric).
_LOWER_IS_BETTER = ("loss", "mse", "mae", "perplexity")


def default_higher_is_better(name: str) -> bool:
    """The direction of a metric when none is declared: lower is better for losses and errors.

    Example:
        >>> [default_higher_is_better(n) for n in ("acc", "mse", "val/loss", "perplexity", "f1")]
        [True, False, False, False, True]
    """
    return not any(fragment in name.lower() for fragment in _LOWER_IS_BETTER)


def value_fairness(values: Tensor | Sequence[float], higher_is_better: bool = True,
                   weights: Tensor | Sequence[float] | None = None) -> dict[str, float]:
    """Fairness statistics of per-client metric values, the tails following the metric's direction.

    Over the ``N`` clients whose value is not ``NaN`` (a client without samples has none) and with
    ``m = ceil(0.2 N)`` (:func:`~lightning_fl.functional.fairness.tail_count`):

    * ``mean``: ``mean_k v_k``, unweighted over clients.
    * ``weighted``: ``sum_k w_k v_k / sum_k w_k`` (``weights``: the clients' sample counts; the
      unweighted mean without them).
    * ``worst20`` / ``best20``: the mean of the ``m`` worst / best values; with ``higher_is_better``
      the worst are the lowest, otherwise the highest (the worst 20% of an MSE are its largest errors).
    * ``var``: population variance of ``v_k`` (divide by ``N``) in the metric's units squared (unlike
      ``acc_var``, which is in percent^2); ``std = sqrt(var)``.
    * ``min`` / ``max``: the smallest / largest value, whatever the direction.
    * ``jain``: Jain's index ``(sum v_k)^2 / (N sum v_k^2)`` of the values as they are (1 when all are
      0, ``NaN`` when a value is negative: the index is defined for non-negative allocations only).

    Args:
        values: ``(N_all,)`` per-client values, ``NaN`` for clients left out.
        higher_is_better: The metric's direction (``True`` for accuracy, ``False`` for a loss).
        weights: ``(N_all,)`` non-negative weights (sample counts) of the ``weighted`` mean.

    Returns:
        Dict with exactly the keys of :data:`VALUE_FAIRNESS_KEYS`, Python floats (float64 arithmetic).

    Raises:
        ValueError: If ``values`` is not 1-D, has an infinite entry, no client has a value, or
            ``weights`` differs in length or is negative.

    Example:
        >>> m = value_fairness([0.1, 0.4, 0.2, 0.9, 0.4], higher_is_better=False)
        >>> m["mean"], m["worst20"], m["best20"], round(m["var"], 4)
        (0.4, 0.9, 0.1, 0.076)
    """
    vals = torch.as_tensor(values, dtype=torch.float64).detach().cpu()
    if vals.ndim != 1:
        raise ValueError(f"values must be 1-D (one entry per client), got shape {tuple(vals.shape)}")
    if torch.isinf(vals).any():
        raise ValueError("values must be finite or NaN (NaN: a client left out)")
    present = ~vals.isnan()
    if not bool(present.any()):
        raise ValueError(f"no client has a value (N={vals.numel()}); fairness statistics are undefined")
    if weights is None:
        w = torch.ones_like(vals)
    else:
        w = torch.as_tensor(weights, dtype=torch.float64).detach().cpu()
        if w.shape != vals.shape:
            raise ValueError(f"weights must match values, got {tuple(w.shape)} and {tuple(vals.shape)}")
        if (w < 0).any():
            raise ValueError("weights must be non-negative")
    v, w = vals[present], w[present]
    n, m = v.numel(), tail_count(v.numel())
    ordered = torch.sort(v).values
    low, high = ordered[:m].mean(), ordered[n - m :].mean()
    var = ((v - v.mean()) ** 2).mean()
    sum_sq = (v**2).sum()
    if bool((v < 0).any()):
        jain = math.nan
    else:
        jain = 1.0 if float(sum_sq) == 0.0 else float(v.sum() ** 2 / (n * sum_sq))
    weighted = (w * v).sum() / w.sum() if float(w.sum()) > 0 else v.mean()
    return {
        "mean": float(v.mean()),
        "weighted": float(weighted),
        "worst20": float(low if higher_is_better else high),
        "best20": float(high if higher_is_better else low),
        "var": float(var),
        "std": math.sqrt(float(var)),
        "min": float(ordered[0]),
        "max": float(ordered[-1]),
        "jain": jain,
    }
