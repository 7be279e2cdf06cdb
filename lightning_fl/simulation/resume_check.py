"""What a checkpoint was trained under, and which of it a resumed run may change.

A resumed run is only the continuation of the checkpointed one if it trains the same way: the same
model and client optimizer, local work (a hierarchy's ``local_rounds`` too), cohort, seed, data and
partition, and the same algorithm with the same arguments and aggregation pipeline. :func:`run_config` records those as flat,
named values in every checkpoint; :func:`changed_fields` names the ones a new run changes, and the
loop refuses to resume across them unless ``model.resume_despite_changes`` says the user means it.

Free to change (same model, or equal to float rounding): the engine, ``max_parallel_clients``,
``exchange``, ``client_state``, ``eval_batch_size``, ``cpu_threads``, the number of processes, the
metrics callbacks and ``trainer.max_epochs``.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Iterable
from typing import Any

import torch

from lightning_fl.aggregation.pipeline import AggregationPipeline
from lightning_fl.engines.hooks import ClientHookSet
from lightning_fl.simulation.callback import AggregationCallback, FederatedCallback
from lightning_fl.state.data import FederatedData
from lightning_fl.state.init_args import describe

#: The FederatedLoop arguments a resumed run must share with its checkpoint.
LOOP_FIELDS = ("clients_per_round", "local_epochs", "batch_size", "sampling", "seed", "keep_client_optimizer_state",
               "on_client_divergence")
#: Fields recorded since a later version; a checkpoint written before lacks them and they are not compared.
LATER_FIELDS = ("model.hierarchy.local_rounds", "data.generator", "data.lazy")


def data_digest(data: FederatedData) -> str:
    """A SHA-256 of every client's training and test tensors and their client boundaries (a lazy source's own)."""
    if hasattr(data, "digest"):  # a lazy source: a digest of what determines its samples
        return data.digest()
    digest = hashlib.sha256()
    for tensor in (data.x_train, data.y_train, data.train_offsets, data.x_test, data.y_test, data.test_offsets):
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(str((flat.dtype, tuple(tensor.shape))).encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return digest.hexdigest()


def trains(callback: FederatedCallback) -> bool:
    """Whether ``callback`` changes how the model trains (an aggregation or a client-side hook)."""
    return isinstance(callback, AggregationCallback) or any(
        ClientHookSet([callback]).has(name) for name in ClientHookSet([callback]).by_name)


def run_config(loop: Any, datamodule: Any, callbacks: Iterable[FederatedCallback], data_sha: str) -> dict[str, Any]:
    """Flat ``field -> value`` record of everything that decides the trained model (see the module docstring)."""
    config: dict[str, Any] = {f"model.{name}": getattr(loop, name) for name in LOOP_FIELDS}
    if loop.hierarchy is not None:  # the assignment and institution aggregation are checked by the hierarchy
        config["model.hierarchy.local_rounds"] = loop.hierarchy.local_rounds
        if loop.hierarchy.institution_pipeline is not None:
            config["model.hierarchy.institution_pipeline"] = describe(loop.hierarchy.institution_pipeline)
    if loop.aggregation != AggregationPipeline():  # recorded when set, so older checkpoints compare equal
        config["model.aggregation"] = describe(loop.aggregation)
    if loop.attack is not None:
        config["model.attack"] = describe(loop.attack)
    if getattr(loop, "lr_schedule", None) is not None:  # recorded when set, as the pipeline
        config["model.lr_scheduler"] = describe(loop.lr_schedule.settings)
    if getattr(loop, "dp", None) is not None:
        config["model.dp"] = describe(loop.dp)
    config["model.client"] = type(loop.model).__qualname__
    config["model.client shapes"] = {n: list(p.shape) for n, p in loop.model.state_dict().items()}
    probe = loop.optimizer_factory([torch.nn.Parameter(torch.zeros(1))])
    config["model.optimizer"] = {"class": type(probe).__qualname__, **describe(dict(probe.defaults))}
    config["data"] = type(datamodule).__qualname__
    for name, value in getattr(datamodule, "init_args", {}).items():
        config[f"data.{name}"] = describe(value)
    config["data contents"] = data_sha
    for callback in callbacks:
        if trains(callback):
            name = type(callback).__name__
            config[f"callbacks.{name}"] = describe(callback.init_args)
    return config


def implied_defaults(callbacks: Iterable[FederatedCallback]) -> dict[str, Any]:
    """``callbacks.<Class>.<arg>`` -> the default of every init argument of the training callbacks.

    A checkpoint written before an argument existed (DWFed's ``distance``) ran what its default does
    now (a new argument defaults to the old behaviour), so :func:`changed_fields` reads the default there.
    """
    implied = {}
    for callback in callbacks:
        if trains(callback):
            for arg, parameter in inspect.signature(type(callback).__init__).parameters.items():
                if parameter.default is not inspect.Parameter.empty:
                    implied[f"callbacks.{type(callback).__name__}.{arg}"] = describe(parameter.default)
    return implied


def changed_fields(saved: dict[str, Any], current: dict[str, Any], implied: dict[str, Any] | None = None) -> list[str]:
    """``"field: checkpoint X vs config Y"`` for every field that differs (added or removed included).

    ``implied``: values a checkpoint that lacks a field ran with (:func:`implied_defaults`).
    """
    saved, current = _flatten(saved, current), _flatten(current, saved)
    saved |= {f: v for f, v in (implied or {}).items() if f not in saved and f in current
              and f.rpartition(".")[0] in {g.rpartition(".")[0] for g in saved}}
    current = {f: v for f, v in current.items() if f in saved or f not in LATER_FIELDS}
    differ = [f for f in sorted(set(saved) | set(current), key=lambda f: (f.split(".")[0] != "model", f))
              if saved.get(f, "absent") != current.get(f, "absent")]
    if any(f.startswith("data.") for f in differ):  # the changed argument explains the other samples
        differ = [f for f in differ if f != "data contents"]
    return ["data contents differ (same arguments, other samples)" if f == "data contents" else
            f"{f}: checkpoint {_short(saved.get(f, 'absent'))} vs config {_short(current.get(f, 'absent'))}"
            for f in differ]


def _flatten(config: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """``config`` with dict values that ``other`` also has as dicts split into ``field.key`` entries,
    so a message names ``model.optimizer.lr`` rather than two whole optimizer descriptions."""
    flat: dict[str, Any] = {}
    for field, value in config.items():
        if isinstance(value, dict) and isinstance(other.get(field), dict):
            flat.update(_flatten({f"{field}.{k}": v for k, v in value.items()},
                                 {f"{field}.{k}": v for k, v in other[field].items()}))
        else:
            flat[field] = value
    return flat


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
