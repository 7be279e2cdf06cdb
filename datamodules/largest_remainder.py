"""Integer shares that sum exactly to a total (Hamilton's largest-remainder method)."""

from __future__ import annotations

import numpy as np

__all__ = ["largest_remainder", "rows_largest_remainder"]


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


def rows_largest_remainder(weights: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """:func:`largest_remainder` of every row of ``weights`` to its own total, in one pass.

    Row ``i`` of the result equals ``largest_remainder(weights[i], totals[i])`` (same arithmetic, same
    tie-breaking by position); vectorised because the per-client Dirichlet rounds one row per client.

    Args:
        weights: ``(rows, k)`` non-negative weights; an all-zero row counts as equal weights.
        totals: ``(rows,)`` non-negative integer totals.

    Returns:
        ``(rows, k)`` ``int64``; row ``i`` sums to ``totals[i]``.

    Example:
        >>> rows_largest_remainder(np.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]), np.array([10, 2])).tolist()
        [[4, 3, 3], [1, 1, 0]]
    """
    weights = np.asarray(weights, dtype=np.float64)
    totals = np.asarray(totals, dtype=np.int64)
    weights = np.where(weights.sum(axis=1, keepdims=True) > 0, weights, 1.0)
    raw = weights / weights.sum(axis=1, keepdims=True) * totals[:, None]
    base = np.floor(raw).astype(np.int64)
    short = totals - base.sum(axis=1)
    order = np.argsort(-(raw - base), axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(order.shape[1]), order.shape), axis=1)
    return base + (rank < short[:, None])
