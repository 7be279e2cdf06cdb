"""Client engines: how a cohort's local training is executed."""

from lightning_fl.engines.base import ClientEngine, LocalTrainingPlan
from lightning_fl.engines.cohort import CohortUpdate, LocalTrainingContext
from lightning_fl.engines.hooks import ClientHooks, ClientHookSet
from lightning_fl.engines.sequential import SequentialEngine

ENGINES = {"sequential": SequentialEngine}

__all__ = ["ENGINES", "ClientEngine", "ClientHookSet", "ClientHooks", "CohortUpdate", "LocalTrainingContext",
           "LocalTrainingPlan", "SequentialEngine"]
