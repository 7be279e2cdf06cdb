"""The aggregation pipeline and its stages (docs/architecture.md, Aggregation pipeline).

``model.aggregation`` configures an :class:`AggregationPipeline`: client-update transforms, at most one
pre-aggregator, a combining rule and a server optimizer, each a small class with declared state over
the pure functions of :mod:`lightning_fl.functional`. The aggregation callbacks (``FedAvg``, ``FedFa``,
...) supply the weights; the pipeline combines.
"""

from lightning_fl.aggregation.distance_rules import Bulyan, Krum, MultiKrum
from lightning_fl.aggregation.pipeline import AggregationPipeline, Combination
from lightning_fl.aggregation.pre_aggregators import Bucketing, NearestNeighbourMixing, PreAggregator
from lightning_fl.aggregation.rules import CenteredClipping, CombiningRule, GeometricMedian, Mean, Median, TrimmedMean
from lightning_fl.aggregation.server_optimizers import (
    ServerAdagrad,
    ServerAdam,
    ServerAdaptive,
    ServerMomentum,
    ServerOptimizer,
    ServerSGD,
    ServerYogi,
)
from lightning_fl.aggregation.stage import PipelineStage, StageContext
from lightning_fl.aggregation.transforms import AggregateTransform, NormClip, UpdateTransform

__all__ = [
    "AggregateTransform", "AggregationPipeline", "Bucketing", "Bulyan", "CenteredClipping", "Combination", "CombiningRule",
    "GeometricMedian", "Krum", "Mean", "Median", "MultiKrum", "NearestNeighbourMixing", "NormClip",
    "PipelineStage", "PreAggregator", "ServerAdagrad", "ServerAdam", "ServerAdaptive", "ServerMomentum",
    "ServerOptimizer", "ServerSGD", "ServerYogi", "StageContext", "TrimmedMean", "UpdateTransform",
]
