"""Distance-based combining rules: Krum, Multi-Krum and Bulyan (docs/algorithms.md, Robust aggregation rules).

Thin classes over :mod:`lightning_fl.functional.robust_distance`: the pairwise squared distances are
one matrix computation over the stacked ``(K_t, P)`` rows (exact differences by default, the Gram form
as an option), never a loop over pairs. Each returns the cohort indices it picked, which the pipeline
logs as ``robust/byzantine_selected`` when an attack is configured.
"""

from __future__ import annotations

from torch import Tensor

from lightning_fl.aggregation.rules import CombiningRule
from lightning_fl.aggregation.stage import StageContext
from lightning_fl.faults.validation import check_choice, check_positive
from lightning_fl.functional.robust_distance import DISTANCES, NEIGHBOURS, bulyan, krum, multi_krum


def _check_distance(distance: str) -> None:
    check_choice("model.aggregation.rule.init_args.distance", distance, DISTANCES)


class Krum(CombiningRule):
    """Krum (Blanchard et al. 2017): the row with the lowest sum of squared distances to its neighbours.

    It needs ``K > 2f + 2`` and ignores ``p``.

    Args:
        krum_neighbours: ``spec`` (the ``K - f - 2`` nearest, Blanchard, Flower) or ``byzfl`` (ByzFL's ``K - f - 1``).
        distance: ``exact`` (differences) or ``gram`` (``|a|^2 + |b|^2 - 2ab``, faster, less precise).
    """

    requirement = "krum"
    picks_rows = True

    def __init__(self, krum_neighbours: str = "spec", distance: str = "exact") -> None:
        check_choice("model.aggregation.rule.init_args.krum_neighbours", krum_neighbours, NEIGHBOURS)
        _check_distance(distance)
        self.krum_neighbours, self.distance = krum_neighbours, distance

    def combine(self, U: Tensor, p: Tensor, f: int, ctx: StageContext) -> tuple[Tensor, Tensor | None]:
        return krum(U, f, self.krum_neighbours, self.distance)


class MultiKrum(CombiningRule):
    """Multi-Krum: the ``p``-weighted mean of the ``m`` rows with the lowest Krum scores.

    It needs ``K > 2f + 2``; the selection ignores ``p``.

    Args:
        m: Rows kept, ``1 <= m <= K_t - f`` (``None``: ``K_t - f``, ByzFL); clamped to ``K_t - f`` in a
            smaller cohort.
        weighted: Average the kept rows with ``p`` (Flower, with sample counts); ``false``: plain mean.
        distance: ``exact`` or ``gram``.
    """

    requirement = "multi_krum"
    picks_rows = True

    def __init__(self, m: int | None = None, weighted: bool = True, distance: str = "exact") -> None:
        if m is not None:
            check_positive("model.aggregation.rule.init_args.m", m, integer=True)
        _check_distance(distance)
        self.m, self.weighted, self.distance = m, bool(weighted), distance
        self.reads_weights = self.weighted

    def combine(self, U: Tensor, p: Tensor, f: int, ctx: StageContext) -> tuple[Tensor, Tensor | None]:
        m = None if self.m is None else min(self.m, U.shape[0] - f)
        return multi_krum(U, f, m, p, self.weighted, self.distance)


class Bulyan(CombiningRule):
    """Bulyan (El Mhamdi et al. 2018), as Flower's: repeated Krum picks, then a trimmed median per coordinate.

    It needs ``K >= 4f + 3`` and ignores ``p``.

    Args:
        distance: ``exact`` or ``gram``.
    """

    requirement = "bulyan"
    picks_rows = True

    def __init__(self, distance: str = "exact") -> None:
        _check_distance(distance)
        self.distance = distance

    def combine(self, U: Tensor, p: Tensor, f: int, ctx: StageContext) -> tuple[Tensor, Tensor | None]:
        return bulyan(U, f, self.distance)


__all__ = ["Bulyan", "Krum", "MultiKrum"]
