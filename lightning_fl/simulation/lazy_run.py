"""A run over a lazy federation: its one-line refusals, its set-up probe and what stays ``N``-sized.

With ``data.lazy: true`` the datamodule's :class:`~lightning_fl.state.data.ClientData` source holds the
clients' sizes only. Each round the :class:`~lightning_fl.simulation.rounds.RoundRunner` stages the
cohort on the training device (:meth:`~lightning_fl.engines.base.ClientEngine.stage`) and evaluation
stages ``model.eval.client_subset`` clients, so a round produces ``K + m`` clients' samples, never ``N``
(docs/scaling.md, Many clients). What needs every client's samples is refused here, before training,
with one line naming the field.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lightning_fl.engines.evaluation import GlobalModelView
from lightning_fl.faults.validation import ConfigError
from lightning_fl.state.data import ClientData, FederatedData, offsets_from_sizes

__all__ = ["EVERY_CLIENT_READERS", "LazyGlobalModelView", "check_lazy_run", "federation_label_histograms",
           "lazy_probe", "set_up_data"]

#: Callbacks that read every client's labels or samples -> what they read (a lazy source holds neither).
EVERY_CLIENT_READERS = {"DWFed": "the (N, C) label histograms", "GlobalTrainLoss": "every client's train split",
                        "ModelDivergence": "every client's samples pooled"}

_LAZY = "data.lazy: true"


def check_lazy_run(loop: Any, source: ClientData, callbacks: list[Any]) -> None:
    """One-line ``ConfigError`` for what a lazy federation cannot give: every client's samples or labels.

    Args:
        loop: The :class:`~lightning_fl.simulation.loop.FederatedLoop` (its options are read).
        source: The lazy source.
        callbacks: The trainer's callbacks.
    """
    if loop.sampling != "uniform":
        raise ConfigError(f"{_LAZY} needs model.sampling: uniform (K clients drawn in O(K)); got sampling:"
                          f" {loop.sampling}, which reads every client")
    refused = [("model.hierarchy", loop.hierarchy is not None, "trains every client each round"),
               ("model.system", loop.system is not None, "draws every client's availability each round"),
               ("model.attack", loop.attack is not None and loop.attack.flips_labels,
                "rewrites the Byzantine clients' labels in memory"),
               ("model.dp.sampling: poisson", loop.dp is not None and loop.dp.sampling == "poisson" and not loop.dp.local,
                "draws every client each round; use model.dp.sampling: fixed")]
    for field, on, why in refused:
        if on:
            raise ConfigError(f"{_LAZY} cannot be combined with {field} (it {why}); use data.lazy: false")
    readers = sorted(type(c).__name__ for c in callbacks if type(c).__name__ in EVERY_CLIENT_READERS)
    if readers:
        raise ConfigError(f"{_LAZY} does not hold {EVERY_CLIENT_READERS[readers[0]]}, which {readers[0]} reads;"
                          " remove it or use data.lazy: false")
    protocol = loop.eval_protocol
    if protocol is None or protocol.client_subset is None:
        raise ConfigError(f"{_LAZY} evaluates a declared subset of the {source.num_clients} clients: set"
                          " model.eval.client_subset (e.g. model.eval: {client_subset: 1000})")
    if protocol.model != "global":
        raise ConfigError(f"{_LAZY} evaluates the global model only; got model.eval.model: {protocol.model}")


def lazy_probe(source: ClientData, device: torch.device) -> FederatedData:
    """Client 0 staged on ``device``: the samples the set-up checks and the engines' self-checks read."""
    return source.stage(torch.zeros(1, dtype=torch.long), "val" if source.has_validation else "train", device)


class _SplitSizes:
    """What the set-up's test-split check reads (``test_offsets``, ``has_validation``), from the sizes alone."""

    def __init__(self, source: ClientData) -> None:
        self.test_offsets = offsets_from_sizes(source.sizes("test"))
        self.has_validation = source.has_validation


def set_up_data(loop: Any, source: ClientData | FederatedData, stage: str,
                checks: Any) -> tuple[FederatedData, ClientData | FederatedData]:
    """Run the set-up checks and return ``(samples, data)``: what the engines set up with, what the loop holds.

    Eager: both are the whole federation on the training device. Lazy: the checks run on client 0 and on
    the sizes; ``samples`` is client 0 staged (the engines' set-up checks) and ``data`` the source.

    Args:
        loop: The loop (its trainer, model and options).
        source: The datamodule's federation.
        stage: Lightning's stage (``fit``, ``validate``, ``test``).
        checks: ``(check_finite_inputs, check_without_validation, check_setup)`` of the run checks.
    """
    check_finite_inputs, check_without_validation, check_setup = checks
    device = loop.trainer.strategy.root_device
    lazy = not isinstance(source, FederatedData)
    if lazy:
        check_lazy_run(loop, source, list(loop.trainer.callbacks))
    samples = lazy_probe(source, device) if lazy else source
    check_finite_inputs(samples)
    if not source.has_validation:
        check_without_validation(loop.trainer, stage)
    check_setup(loop, _SplitSizes(source) if lazy else source, stage)
    return (samples, source) if lazy else (source.to(device),) * 2


def federation_label_histograms(source: ClientData | FederatedData) -> Tensor:
    """``(N, C)`` label counts for the callbacks; ``(0, C)`` for a lazy source (its readers are refused)."""
    if isinstance(source, FederatedData):
        return source.label_histograms("train").cpu()
    return torch.zeros(0, source.num_classes, dtype=torch.long)


class LazyGlobalModelView(GlobalModelView):
    """The global model's view for callbacks when the federation is lazy: no pooled or per-client samples.

    Scoring every client of a split, or reading every client's samples pooled, is refused with one line.
    """

    def training_data(self) -> tuple[Tensor, Tensor]:
        raise ConfigError(f"a callback reads every client's training samples pooled, which {_LAZY} does not hold;"
                          " remove that callback or use data.lazy: false")

    def evaluate(self, split: str) -> tuple[Tensor, Tensor, Tensor]:
        raise ConfigError(f"a callback scores the global model on every client's {split} split, which {_LAZY} does not"
                          " hold; remove that callback or use data.lazy: false")
