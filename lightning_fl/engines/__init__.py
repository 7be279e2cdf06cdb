"""Client engines: how a cohort's local training is executed."""

from __future__ import annotations

import torch
from pytorch_lightning.utilities import rank_zero_info

from lightning_fl.engines.base import ClientEngine, LocalTrainingPlan
from lightning_fl.engines.cohort import CohortUpdate, LocalTrainingContext
from lightning_fl.engines.hooks import ClientHooks, ClientHookSet
from lightning_fl.engines.selection import choose_engine, vectorization_problem
from lightning_fl.engines.sequential import SequentialEngine
from lightning_fl.engines.vectorized import VectorizedEngine
from lightning_fl.faults.validation import ConfigError
from lightning_fl.models.base import ClientModule

ENGINES: dict[str, type[ClientEngine]] = {"sequential": SequentialEngine, "vectorized": VectorizedEngine}
ENGINE_CHOICES = ("auto", *ENGINES)


def build_engine(name: str, plan: LocalTrainingPlan, model: ClientModule, device: torch.device) -> ClientEngine:
    """Instantiate the engine ``name`` (``auto``, ``sequential``, ``vectorized``) and log which one runs.

    Raises:
        ConfigError: ``engine: vectorized`` with a model or client optimizer it cannot train exactly.
    """
    if name == "auto":
        chosen, reason = choose_engine(plan, model, device)
        rank_zero_info(f"Client engine: {chosen} (auto: {reason})")
        # strict=False: should the set-up self-check fail on real data, train sequentially instead.
        return VectorizedEngine(plan, strict=False) if chosen == "vectorized" else SequentialEngine(plan)
    if name == "vectorized":
        problem = vectorization_problem(plan, model)
        if problem is not None:
            raise ConfigError(f"engine: vectorized cannot train this run ({problem}); use engine: sequential or auto")
    engine = ENGINES[name](plan)
    rank_zero_info(f"Client engine: {engine.name}")
    return engine


__all__ = ["ENGINES", "ENGINE_CHOICES", "ClientEngine", "ClientHookSet", "ClientHooks", "CohortUpdate",
           "LocalTrainingContext", "LocalTrainingPlan", "SequentialEngine", "VectorizedEngine", "build_engine",
           "choose_engine"]
