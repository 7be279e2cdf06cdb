"""Federated callbacks: aggregation (one per run), client-side algorithms, metrics, progress.

The base classes (:class:`~lightning_fl.simulation.callback.FederatedCallback`,
:class:`~lightning_fl.simulation.callback.AggregationCallback`) are part of the core,
:mod:`lightning_fl.simulation.callback`.
"""

if __name__ != "lightning_fl.callbacks":  # one import path per module (see pyproject.toml)
    raise ImportError(f"import this package as lightning_fl.callbacks, not {__name__}")

from lightning_fl.callbacks.apfl import APFL
from lightning_fl.callbacks.communication_cost import CommunicationCost
from lightning_fl.callbacks.ditto import Ditto
from lightning_fl.callbacks.dwfed import DWFed
from lightning_fl.callbacks.fairness_metrics import FairnessMetrics
from lightning_fl.callbacks.fedadaptive import FedAdagrad, FedAdam, FedYogi
from lightning_fl.callbacks.fedadp import FedAdp
from lightning_fl.callbacks.fedavg import FedAvg
from lightning_fl.callbacks.fedavgm import FedAvgM
from lightning_fl.callbacks.fedbn import FedBN
from lightning_fl.callbacks.feddyn import FedDyn
from lightning_fl.callbacks.fedfa import FedFa
from lightning_fl.callbacks.fedfa_mo import FedFaMo
from lightning_fl.callbacks.fednova import FedNova
from lightning_fl.callbacks.fedper import FedPer
from lightning_fl.callbacks.fedprox import FedProx
from lightning_fl.callbacks.fedrep import FedRep
from lightning_fl.callbacks.global_train_loss import GlobalTrainLoss
from lightning_fl.callbacks.igfl import IGFL
from lightning_fl.callbacks.igfl_client import IGFLClient
from lightning_fl.callbacks.igfl_server import IGFLServer
from lightning_fl.callbacks.local import Local
from lightning_fl.callbacks.model_divergence import ModelDivergence
from lightning_fl.callbacks.pfedme import PFedMe
from lightning_fl.callbacks.qffl import QFFL
from lightning_fl.callbacks.round_lines import RoundLines
from lightning_fl.callbacks.round_progress import RoundProgressBar
from lightning_fl.callbacks.rounds_to_target import RoundsToTarget
from lightning_fl.callbacks.scaffold import Scaffold
from lightning_fl.callbacks.tempo import Tempo
from lightning_fl.simulation.default_callbacks import register_defaults

__all__ = [
    "APFL",
    "IGFL",
    "QFFL",
    "DWFed",
    "Ditto",
    "FedFa",
    "FedFaMo",
    "IGFLClient",
    "IGFLServer",
    "CommunicationCost",
    "FairnessMetrics",
    "FedAdagrad",
    "FedAdam",
    "FedAdp",
    "FedAvg",
    "FedAvgM",
    "FedBN",
    "FedDyn",
    "FedNova",
    "FedPer",
    "FedProx",
    "FedRep",
    "FedYogi",
    "GlobalTrainLoss",
    "Local",
    "ModelDivergence",
    "PFedMe",
    "RoundLines",
    "RoundProgressBar",
    "RoundsToTarget",
    "Scaffold",
    "Tempo",
]

register_defaults(aggregation=FedAvg, metrics=FairnessMetrics, progress_bar=RoundProgressBar, round_lines=RoundLines)
