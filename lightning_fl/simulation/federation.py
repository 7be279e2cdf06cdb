"""The read-only description of a federation that every federated callback receives.

Callbacks never reach into the :class:`~lightning_fl.simulation.loop.FederatedLoop`: what they may know about
the run (number of clients, the flat layout of the model state, the client optimizer, label
histograms, the hierarchy, the seed and cohort size, and an evaluation service over the global model)
is a :class:`Federation`, built once when training starts and passed to every hook as an argument.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.optim import Optimizer

from lightning_fl.engines.evaluation import GlobalModelView
from lightning_fl.personalization.protocol import EvalProtocol
from lightning_fl.simulation.lr_schedule import ClientLrSchedule
from lightning_fl.state.flat_state import FlatStateLayout


@dataclass(frozen=True)
class ClientOptimizer:
    """Facts about the configured client optimizer (``model.optimizer``).

    Attributes:
        factory: Builds the optimizer from parameters (at the configured ``lr``).
        base_lr: Its configured learning rate.
        momentum: Its ``momentum`` (0 when it has none).
        keeps_state: Whether each client's optimizer state is kept between its participations
            (``model.keep_client_optimizer_state``).
        schedule: The per-round schedule of the learning rate (``model.lr_scheduler``), if any.
    """

    factory: Callable[[Iterable[Tensor]], Optimizer]
    base_lr: float
    momentum: float = 0.0
    keeps_state: bool = False
    schedule: ClientLrSchedule | None = None

    @property
    def lr(self) -> float:
        """The learning rate ``eta_l`` of the current round (``base_lr`` without a schedule)."""
        return self.base_lr if self.schedule is None else self.schedule.lr()

    def probe(self) -> Optimizer:
        """The optimizer built on a dummy parameter, to read its class and ``defaults``."""
        return self.factory([torch.nn.Parameter(torch.zeros(1))])

    def describe(self) -> str:
        """``torch.optim.SGD(momentum=0.9)``-style name for messages."""
        optimizer = self.probe()
        cls = type(optimizer)
        public = getattr(torch.optim, cls.__name__, None) is cls
        name = f"torch.optim.{cls.__name__}" if public else f"{cls.__module__}.{cls.__qualname__}"
        momentum = optimizer.defaults.get("momentum")
        return f"{name}(momentum={momentum})" if momentum is not None else name

    def is_plain_sgd(self) -> bool:
        """``torch.optim.SGD`` without momentum (so ``nesterov`` and ``dampening`` play no role)."""
        optimizer = self.probe()
        return type(optimizer) is torch.optim.SGD and not optimizer.defaults.get("momentum", 0.0)


@dataclass(frozen=True)
class HierarchyView:
    """The institutions of three-layer training (``model.hierarchy``), read-only.

    Attributes:
        members: One sorted tensor of client ids per institution.
        local_rounds: ``tau_i``, institution rounds per global iteration.
    """

    members: tuple[Tensor, ...]
    local_rounds: int

    @property
    def num_institutions(self) -> int:
        return len(self.members)


@dataclass(frozen=True)
class Federation:
    """What a federated callback may know about the run.

    Attributes:
        num_clients: ``N``.
        num_classes: Label classes.
        layout: The flat fp32 layout of the model's floating-point state (``flatten``/``unflatten``).
        trainable: Names of the model's trainable parameters.
        optimizer: The client optimizer.
        label_histograms: ``(N, C)`` long label counts of every client's train split (CPU).
        train_sizes: ``(N,)`` long ``n_k`` (CPU).
        hierarchy: The institutions in three-layer mode, ``None`` otherwise.
        aggregation: Class name of the run's aggregation callback (e.g. for table rows).
        device: Where the global model lives.
        seed: The run's seed (``model.seed``: cohorts, batch order, keyed draws).
        batch_size: ``B``, the clients' local minibatch size.
        clients_per_round: ``K``, the configured cohort size.
        global_model: Read access to the global model and the data for callbacks that evaluate it
            (:class:`~lightning_fl.engines.evaluation.GlobalModelView`); ``None`` outside a run.
        head_prefixes: Name prefixes of the model's head (``ClientModule.head_prefixes``, personalization).
        batchnorm_entries: State entries of the model's BatchNorm layers (FedBN's personal part).
        evaluated: What ``val/*`` and ``test/*`` score, for table titles: ``global model``, ``personal models``
            or ``fine-tuned global model`` (``model.eval.model``).
        evaluation: The declared evaluation protocol in one line (``model.eval``), printed above every table.
        eval_protocol: The declared evaluation protocol itself (its ``rounds`` rule chooses the evaluations the
            final table reports); ``None`` outside a run, read as the default (``rounds: last``).
    """

    num_clients: int
    num_classes: int
    layout: FlatStateLayout
    trainable: frozenset[str]
    optimizer: ClientOptimizer
    label_histograms: Tensor
    train_sizes: Tensor
    hierarchy: HierarchyView | None = None
    aggregation: str = "FedAvg"
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    seed: int = 0
    batch_size: int = 10
    clients_per_round: int = 10
    global_model: GlobalModelView | None = None
    head_prefixes: tuple[str, ...] = ()
    batchnorm_entries: frozenset[str] = frozenset()
    evaluated: str = "global model"
    evaluation: str = ""
    eval_protocol: EvalProtocol | None = None

    def trainable_mask(self) -> Tensor:
        """``(d,)`` bool on :attr:`device`: the flat entries of trainable parameters."""
        mask = torch.zeros(self.layout.numel, dtype=torch.bool, device=self.device)
        for entry in self.layout.float_entries:
            if entry.name in self.trainable:
                mask[entry.start : entry.stop] = True
        return mask
