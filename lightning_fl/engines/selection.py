"""``engine: auto``: pick the faster client engine for a model, optimizer and device.

The choice is made from the model's layer types, the client optimizer and the device, before any
data is seen, and is stated in the log with its reason. Measured on the 2-core CPU of
docs/performance.md: Linear/Embedding models train far faster vectorized; grouped convolutions and
step-by-step recurrences over a cohort are slower than a plain loop on a CPU, but not on a GPU, where
one large kernel beats many small ones.
"""

from __future__ import annotations

import torch

from lightning_fl.engines.base import LocalTrainingPlan
from lightning_fl.engines.formulation import analyse_model
from lightning_fl.engines.optimizers import optimizer_problem
from lightning_fl.models.base import ClientModule
from lightning_fl.models.user_module import is_user_module


def vectorization_problem(plan: LocalTrainingPlan, model: ClientModule) -> str | None:
    """Why the vectorized engine cannot train this run, or ``None``."""
    problem = optimizer_problem(plan.optimizer_factory)
    if problem is not None:
        return problem
    if is_user_module(model):  # the set-up check on data decides (VectorizedEngine.setup)
        return None if any(p.requires_grad for p in model.parameters()) else "the model has no trainable parameters"
    analysis = analyse_model(model, plan.precision)
    return None if analysis.kinds else analysis.reason


def choose_engine(plan: LocalTrainingPlan, model: ClientModule, device: torch.device) -> tuple[str, str]:
    """``(engine name, reason)`` for ``engine: auto``."""
    problem = vectorization_problem(plan, model)
    if problem is not None:
        return "sequential", f"vectorized impossible: {problem}"
    if is_user_module(model):
        if torch.device(device).type == "cpu":
            # Measured (docs/performance.md, Your own LightningModule): vmap's per-step call costs more than
            # the sequential loop on CPU (J1 1.56x, J2 1.23x its round time); engine: vectorized still runs it.
            return "sequential", "a LightningModule's training_step under vmap is slower than a loop on cpu"
        return "vectorized", f"training_step under vmap on {torch.device(device).type}"
    analysis = analyse_model(model, plan.precision)
    device = torch.device(device)
    if device.type == "cpu" and analysis.cpu_slow:
        slow = ", ".join(analysis.cpu_slow)
        return "sequential", f"{slow} layers are slower batched than in a loop on cpu"
    return "vectorized", f"{analysis.reason} on {device.type}"
