"""Federated callbacks: aggregation (one per run), client-side algorithms, metrics, progress."""

from callbacks.base import AggregationCallback, FederatedCallback
from callbacks.communication_cost import CommunicationCost
from callbacks.dwfed import DWFed
from callbacks.fairness_metrics import FairnessMetrics
from callbacks.fedadaptive import FedAdagrad, FedAdam, FedYogi
from callbacks.fedadp import FedAdp
from callbacks.fedavg import FedAvg
from callbacks.fedavgm import FedAvgM
from callbacks.fedfa import FedFa
from callbacks.fedfa_mo import FedFaMo
from callbacks.fednova import FedNova
from callbacks.fedprox import FedProx
from callbacks.igfl import IGFL
from callbacks.igfl_client import IGFLClient
from callbacks.igfl_server import IGFLServer
from callbacks.qffl import QFFL
from callbacks.round_progress import RoundProgressBar
from callbacks.rounds_to_target import RoundsToTarget
from callbacks.scaffold import Scaffold
from callbacks.tempo import Tempo

__all__ = [
    "IGFL",
    "QFFL",
    "DWFed",
    "FedFa",
    "FedFaMo",
    "IGFLClient",
    "IGFLServer",
    "AggregationCallback",
    "CommunicationCost",
    "FairnessMetrics",
    "FedAdagrad",
    "FedAdam",
    "FedAdp",
    "FedAvg",
    "FedAvgM",
    "FedNova",
    "FedProx",
    "FedYogi",
    "FederatedCallback",
    "RoundProgressBar",
    "RoundsToTarget",
    "Scaffold",
    "Tempo",
]
