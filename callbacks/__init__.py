"""Federated callbacks: aggregation (one per run), client-side algorithms, metrics, progress."""

from callbacks.base import AggregationCallback, FederatedCallback
from callbacks.communication_cost import CommunicationCost
from callbacks.fairness_metrics import FairnessMetrics
from callbacks.fedavg import FedAvg
from callbacks.fedprox import FedProx
from callbacks.round_progress import RoundProgressBar
from callbacks.rounds_to_target import RoundsToTarget
from callbacks.tempo import Tempo

__all__ = ["AggregationCallback", "CommunicationCost", "FairnessMetrics", "FedAvg", "FedProx", "FederatedCallback", "RoundProgressBar",
           "RoundsToTarget", "Tempo"]
