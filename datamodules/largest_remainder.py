"""Integer shares that sum exactly to a total (Hamilton's largest-remainder method)."""

from __future__ import annotations

import numpy as np

__all__ = ["largest_remainder"]


def largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    """Integers proportional to ``weights`` that sum exactly to ``total`` (Hamilton's method).

    All-zero weights count as equal weights. Used for quantity-skewed client sizes
    (:class:`~lightning_fl.datamodules.partitions.Quantity`) and for dealing a test set by label
    (:func:`~lightning_fl.datamodules.train_test_pool.deal_by_label`).

    Example:
        >>> largest_remainder(np.array([1.0, 1.0, 1.0]), 10).tolist()
        [4, 3, 3]
    """
    weights = np.asarray(weights, dtype=np.float64)
    if weights.sum() <= 0:
        weights = np.ones_like(weights)
    raw = weights / weights.sum() * total
    base = np.floor(raw).astype(np.int64)
    short = total - int(base.sum())
    if short > 0:
        # Ties broken by position (stable sort) so the result is deterministic.
        base[np.argsort(-(raw - base), kind="stable")[:short]] += 1
    return base
