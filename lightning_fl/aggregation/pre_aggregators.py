"""Pre-aggregators: one map over the whole stack before the combining rule (docs/algorithms.md, Robust aggregation rules).

Nearest-neighbour mixing (Allouah et al. 2023) replaces each row by the mean of its ``K_t - f``
nearest rows; bucketing (Karimireddy et al. 2022) averages random buckets of ``s`` rows, the
permutation keyed ``(seed, t, "bucketing")`` so every process and every resume draws the same one.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fl.aggregation.stage import PipelineStage, StageContext
from lightning_fl.faults.validation import check_choice, check_positive
from lightning_fl.functional.robust import bucketing
from lightning_fl.functional.robust_distance import DISTANCES, nearest_neighbour_mixing
from lightning_fl.state.seeding import generator_for


class PreAggregator(PipelineStage):
    """Base of the pre-aggregators: ``(U, p) -> (U', p')`` over the whole stack.

    Attributes:
        requirement: The key of :data:`lightning_fl.functional.robust.RULES` naming what it needs of ``K``
            and ``f``.
    """

    requirement: str | None = None

    def mix(self, U: Tensor, p: Tensor, f: int, ctx: StageContext) -> tuple[Tensor, Tensor]:
        """The mixed rows and their weights (on the simplex)."""
        raise NotImplementedError


class NearestNeighbourMixing(PreAggregator):
    """NNM: each row becomes the mean of the ``K_t - f`` rows nearest to it, itself included; ``p`` is unchanged.

    Args:
        distance: ``exact`` (differences) or ``gram``.
    """

    requirement = "nnm"

    def __init__(self, distance: str = "exact") -> None:
        check_choice("model.aggregation.pre_aggregator.init_args.distance", distance, DISTANCES)
        self.distance = distance

    def mix(self, U: Tensor, p: Tensor, f: int, ctx: StageContext) -> tuple[Tensor, Tensor]:
        return nearest_neighbour_mixing(U, f, self.distance), p


class Bucketing(PreAggregator):
    """Bucketing: ``ceil(K_t/s)`` buckets of ``s`` rows in a permutation keyed ``(seed, t, "bucketing")``.

    A bucket's row is the ``p``-weighted mean of its rows, its weight their total weight; the rule then
    runs on the buckets with the same ``f``.

    Args:
        bucket_size: ``s >= 1``.
    """

    requirement = "bucketing"

    def __init__(self, bucket_size: int = 2) -> None:
        check_positive("model.aggregation.pre_aggregator.init_args.bucket_size", bucket_size, integer=True)
        self.bucket_size = int(bucket_size)

    def mix(self, U: Tensor, p: Tensor, f: int, ctx: StageContext) -> tuple[Tensor, Tensor]:
        permutation = torch.randperm(U.shape[0], generator=generator_for(ctx.seed, ctx.round_idx, "bucketing"))
        return bucketing(U, p, self.bucket_size, permutation)


__all__ = ["Bucketing", "NearestNeighbourMixing", "PreAggregator"]
