"""The client module's own metrics: its ``validation_step``/``test_step`` on each client's split, what it logs collected.

A module that overrides ``validation_step`` or ``test_step`` declares how it is judged (MSE for a
regression, perplexity for a language model, a torchmetrics object). Every evaluation then runs that
step on batches ``(x, y)`` of each client's split, one client at a time, with ``log``/``log_dict``
recorded instead of sent to a Trainer: scalars are reduced like Lightning's ``on_epoch`` default (the
mean weighted by batch size), torchmetrics objects are ``compute()``-d and reset per client. A
:class:`~lightning_fl.models.ClientModule` classifier that overrides neither keeps the one-pass
:func:`~lightning_fl.engines.evaluation.evaluate_segments` path and today's exact numbers.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from pytorch_lightning import LightningModule
from torch import Tensor
from torchmetrics import Metric

from lightning_fl.engines.evaluation import ChunkSharding, evaluate_rows, evaluate_segments
from lightning_fl.models.base import ClientModule
from lightning_fl.state.flat_state import FlatStateLayout

__all__ = ["evaluate_row_splits", "evaluate_split", "evaluate_steps", "judged_as_classifier", "logged_names", "metric_key",
           "uses_own_metrics"]

_STEP_OF = {"val": "validation_step", "test": "test_step"}
#: Stage prefixes a logged name may carry; stripped so that ``val/mse`` and ``test/mse`` are one metric.
_STAGE_PREFIXES = ("val/", "test/", "val_", "test_", "validation/", "validation_")
_LOG_SIGNATURE = inspect.signature(LightningModule.log)
_LOG_DICT_SIGNATURE = inspect.signature(LightningModule.log_dict)
_REDUCTIONS = {"mean", "sum", "max", "min"}


def metric_key(name: str) -> str:
    """A logged or declared metric name without its stage prefix: ``val/mse``, ``test_mse``, ``mse`` -> ``mse``."""
    for prefix in _STAGE_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def _overrides(model: torch.nn.Module | type, name: str) -> bool:
    cls = model if isinstance(model, type) else type(model)
    return getattr(cls, name, None) is not getattr(LightningModule, name)


def uses_own_metrics(model: torch.nn.Module | type) -> bool:
    """True when ``model`` (a module or its class) overrides ``validation_step`` or ``test_step``."""
    return _overrides(model, "validation_step") or _overrides(model, "test_step")


def judged_as_classifier(model: torch.nn.Module | type) -> bool:
    """Whether ``model`` is scored by argmax accuracy and cross-entropy of its ``forward`` (the fast path).

    Every :class:`ClientModule`, and any other module that writes neither ``validation_step`` nor
    ``test_step``: it declares no metric of its own, so its forward is read as class logits, as
    Lightning users' classifiers return them (the set-up check of ``FairnessMetrics`` verifies the shape).
    """
    cls = model if isinstance(model, type) else type(model)
    return issubclass(cls, ClientModule) or not uses_own_metrics(cls)


def _step(model: LightningModule, stage: str) -> Callable[[Any, int], Any]:
    # A module that writes one of the two steps is judged by it on both splits: Lightning users often
    # write only validation_step, and a split without a step would otherwise have no metric at all.
    wanted = _STEP_OF.get(stage.split("/")[0], "validation_step")
    other = "test_step" if wanted == "validation_step" else "validation_step"
    return getattr(model, wanted if _overrides(model, wanted) else other)


class _LogRecorder:
    """Stands in for ``LightningModule.log``/``log_dict`` during one client's evaluation."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget the previous client's values."""
        self.batch_size = 0
        self.scalars: dict[str, list[tuple[float, int]]] = {}
        self.reductions: dict[str, str] = {}
        self.metrics: dict[str, Metric] = {}

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        bound = _LOG_SIGNATURE.bind(None, name, value, *args, **kwargs)
        bound.apply_defaults()
        key = metric_key(name)
        if isinstance(value, Metric):  # computed over all the client's batches at the end, like Lightning
            self.metrics[key] = value
            return
        reduce_fx = bound.arguments["reduce_fx"]
        reduce_fx = getattr(reduce_fx, "__name__", reduce_fx)
        if reduce_fx not in _REDUCTIONS:
            raise ValueError(f"self.log({name!r}, reduce_fx={reduce_fx!r}): evaluation reduces with mean, sum, max"
                             " or min only")
        value = torch.as_tensor(value)
        if value.numel() != 1:
            raise ValueError(f"self.log({name!r}) logged a tensor of shape {tuple(value.shape)}; log a scalar")
        batch_size = bound.arguments["batch_size"] or self.batch_size
        self.scalars.setdefault(key, []).append((float(value), int(batch_size)))
        self.reductions[key] = reduce_fx

    def log_dict(self, dictionary: Any, *args: Any, **kwargs: Any) -> None:
        bound = _LOG_DICT_SIGNATURE.bind(None, dictionary, *args, **kwargs)
        options = {k: v for k, v in bound.arguments.items() if k not in ("self", "dictionary")}
        for name, value in dictionary.items():
            self.log(name, value, **{k: v for k, v in options.items() if k in _LOG_SIGNATURE.parameters})

    def values(self) -> dict[str, float]:
        """The client's metrics; torchmetrics objects are computed, then reset for the next client."""
        out: dict[str, float] = {}
        for key, entries in self.scalars.items():
            values = torch.tensor([v for v, _ in entries], dtype=torch.float64)
            sizes = torch.tensor([b for _, b in entries], dtype=torch.float64)
            reduce_fx = self.reductions[key]
            if reduce_fx == "mean":  # Lightning's on_epoch default: the batch-size-weighted mean
                out[key] = float((values * sizes).sum() / sizes.sum())
            else:
                out[key] = float(getattr(values, reduce_fx)())
        for key, metric in self.metrics.items():
            out[key] = _local_compute(metric)
            metric.reset()
        return out


def _local_compute(metric: Metric) -> float:
    """``metric.compute()`` over this process's states only.

    Under torch.distributed a torchmetrics ``compute()`` all-gathers every process's states, which here
    would merge the clients the other ranks are evaluating into this client's value (and wait forever
    where the ranks hold different numbers of clients): each client is evaluated whole on one rank.
    """
    available, metric.distributed_available_fn = metric.distributed_available_fn, lambda: False
    try:
        return float(metric.compute())
    finally:
        metric.distributed_available_fn = available


@contextmanager
def _recording(model: LightningModule) -> Iterator[_LogRecorder]:
    recorder = _LogRecorder()
    # Instance attributes shadow the methods for this evaluation only: nothing reaches a Trainer, and
    # deleting them restores the class's log/log_dict whatever the step raised.
    model.log, model.log_dict = recorder.log, recorder.log_dict  # type: ignore[method-assign]
    try:
        yield recorder
    finally:
        del model.log, model.log_dict


def _reset_metrics(model: torch.nn.Module) -> None:
    # A client's values must depend on its own data only, not on what an earlier client, a training
    # step or the set-up check left in a metric's state.
    for module in model.modules():
        if isinstance(module, Metric):
            module.reset()


@torch.no_grad()
def evaluate_steps(model: LightningModule, stage: str, splits: dict[int, tuple[Tensor, Tensor]],
                   batch_size: int = 4096) -> dict[int, dict[str, float]]:
    """Each listed client's metrics: the module's step for ``stage`` on its split, what it logs reduced.

    Args:
        model: The client module (switched to eval mode and back; fp32, autocast off).
        stage: ``val``, ``test`` (``<stage>/unseen`` too) or ``train``: which step runs (see the module doc).
        splits: Client id -> that client's ``(x, y)``; a client without samples gets no entry.
        batch_size: Samples per step call.

    Returns:
        Client id -> ``{metric key: value}``, keys without their stage prefix (:func:`metric_key`).
    """
    step, out = _step(model, stage), {}
    if not splits:
        return out
    was_training = model.training
    model.eval()
    try:
        with _recording(model) as recorder, torch.autocast(next(iter(splits.values()))[0].device.type, enabled=False):
            for client, (x, y) in splits.items():
                if not len(y):
                    continue
                _reset_metrics(model)
                recorder.clear()
                for batch_idx, start in enumerate(range(0, len(y), batch_size)):
                    recorder.batch_size = len(y[start : start + batch_size])
                    step((x[start : start + batch_size], y[start : start + batch_size]), batch_idx)
                out[client] = recorder.values()
    finally:
        model.train(was_training)
    return out


def logged_names(model: LightningModule, x: Tensor, y: Tensor) -> dict[str, set[str]]:
    """The metric keys each step logs on a few samples, the set-up check of a declared ``fairness_metric``.

    Returns:
        ``{"val": keys, "test": keys}`` (empty sets when the module overrides neither step).
    """
    if not uses_own_metrics(model):
        return {"val": set(), "test": set()}
    names = {stage: set(evaluate_steps(model, stage, {0: (x, y)}, len(y))[0]) for stage in ("val", "test")}
    _reset_metrics(model)
    return names


def evaluate_split(model: LightningModule, stage: str, x: Tensor, y: Tensor, offsets: Tensor, batch_size: int = 4096,
                   sharding: ChunkSharding | None = None) -> tuple[Tensor, Tensor, Tensor, dict[str, Tensor]]:
    """``(correct, total, loss_sum, values)`` of ``model`` on every client's part of ``x``, ``y``.

    ``values`` maps each metric key the module logs to ``(N,)`` float64 per-client values (``NaN`` for
    a client without samples or without that metric); it is empty on the fast path. A
    :class:`ClientModule` also gets ``correct``/``loss_sum`` from the fast path, so accuracy stays
    available beside its own metrics; another module has ``NaN`` accuracy and its logged ``loss``
    (``NaN`` without one) as ``loss_sum / total``. With ``sharding``, rank ``r`` evaluates clients
    ``r, r + W, ...`` and the per-client values are gathered (each client's value is computed on one
    rank from its data alone, so any ``W`` gives the same numbers).
    """
    classifier = judged_as_classifier(model)
    if classifier:
        correct, total, loss_sum = evaluate_segments(model, x, y, offsets, batch_size, sharding)
        if not uses_own_metrics(model):
            return correct, total, loss_sum, {}
    num_clients = len(offsets) - 1
    total = offsets.diff().double().cpu()
    sharded = sharding is not None and sharding.active
    mine = range(sharding.rank, num_clients, sharding.world_size) if sharded else range(num_clients)
    results = evaluate_steps(model, stage, {k: (x[offsets[k] : offsets[k + 1]], y[offsets[k] : offsets[k + 1]])
                                            for k in mine}, batch_size)
    if sharded:
        results = sharding.gather_dict(results, "evaluation")
    values = _stacked(results, num_clients)
    if not classifier:
        correct, loss_sum = _no_accuracy(values, total)
    return correct, total, loss_sum, values


def _stacked(results: dict[int, dict[str, float]], num_clients: int) -> dict[str, Tensor]:
    keys = sorted({key for client_values in results.values() for key in client_values})
    values = {key: torch.full((num_clients,), float("nan"), dtype=torch.float64) for key in keys}
    for client, client_values in results.items():
        for key, value in client_values.items():
            values[key][client] = value
    return values


def _no_accuracy(values: dict[str, Tensor], total: Tensor) -> tuple[Tensor, Tensor]:
    # A module that is not a ClientModule has no argmax accuracy to report: NaN says so, where 0 would lie.
    nan = torch.full_like(total, float("nan"))
    return nan, (values["loss"] * total if "loss" in values else nan.clone())


def evaluate_row_splits(model: LightningModule, layout: FlatStateLayout, rows: Tensor, stage: str,
                        splits: list[tuple[Tensor, Tensor]], batch_size: int = 4096
                        ) -> tuple[Tensor, Tensor, Tensor, dict[str, Tensor]]:
    """:func:`evaluate_split` of personal models: row ``i`` of ``rows`` on split ``i`` (``(K,)`` results).

    Each row is copied into the model's state for its client's steps and the model's own state is put
    back bit for bit afterwards (a step is a method, which ``functional_call`` cannot run).
    """
    classifier = judged_as_classifier(model)
    if classifier:
        correct, total, loss_sum = evaluate_rows(model, layout, rows, splits, batch_size)
        if not uses_own_metrics(model):
            return correct, total, loss_sum, {}
    total = torch.tensor([float(len(y)) for _, y in splits], dtype=torch.float64)
    state = model.state_dict()
    own = layout.flatten(state).clone()
    results: dict[int, dict[str, float]] = {}
    try:
        for i, split in enumerate(splits):
            layout.load_into(rows[i], state)
            results.update(evaluate_steps(model, stage, {i: split}, batch_size))
    finally:
        layout.load_into(own, state)
    values = _stacked(results, len(splits))
    if not classifier:
        correct, loss_sum = _no_accuracy(values, total)
    return correct, total, loss_sum, values
