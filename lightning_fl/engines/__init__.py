"""Client engines: how a cohort's local training is executed."""

from __future__ import annotations

import torch
from pytorch_lightning.utilities import rank_zero_info

from lightning_fl.engines.base import ClientEngine, LocalTrainingPlan
from lightning_fl.engines.cohort import CohortUpdate, LocalTrainingContext
from lightning_fl.engines.hooks import ClientHooks, ClientHookSet
from lightning_fl.engines.sequential import SequentialEngine
from lightning_fl.models.base import ClientModule

ENGINES: dict[str, type[ClientEngine]] = {"sequential": SequentialEngine}
ENGINE_CHOICES = tuple(ENGINES)


def build_engine(name: str, plan: LocalTrainingPlan, model: ClientModule, device: torch.device) -> ClientEngine:
    """Instantiate the engine ``name`` for ``model`` on ``device`` and say in the log which one runs."""
    engine = ENGINES[name](plan)
    rank_zero_info(f"Client engine: {engine.name}")
    return engine


__all__ = ["ENGINES", "ENGINE_CHOICES", "ClientEngine", "ClientHookSet", "ClientHooks", "CohortUpdate",
           "LocalTrainingContext", "LocalTrainingPlan", "SequentialEngine", "build_engine"]
