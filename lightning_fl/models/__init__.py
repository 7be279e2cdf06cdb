"""Client models (LightningModules)."""

from lightning_fl.models.base import ClientModule
from lightning_fl.models.cnn import CNN28
from lightning_fl.models.logistic import LogisticRegression
from lightning_fl.models.mlp import MLP

__all__ = ["CNN28", "MLP", "ClientModule", "LogisticRegression"]
