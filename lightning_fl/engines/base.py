"""The client-engine interface and what every engine shares (batch schedule, statistics)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import torch
from torch import Tensor
from torch.optim import Optimizer

from lightning_fl.engines.cohort import CohortUpdate, LocalTrainingContext
from lightning_fl.engines.evaluation import client_train_losses, trained_accuracies
from lightning_fl.engines.hooks import ClientHookSet
from lightning_fl.functional.system import samples_seen
from lightning_fl.models.base import ClientModule
from lightning_fl.state.client_state import ClientStateStore
from lightning_fl.state.data import ClientData, FederatedData
from lightning_fl.state.flat_state import FlatStateLayout
from lightning_fl.state.seeding import generator_for


@dataclass
class LocalTrainingPlan:
    """How every client trains locally (docs/algorithms.md, Local training).

    Attributes:
        optimizer_factory: Builds the client optimizer from parameters (the config's ``optimizer``).
        local_epochs: ``E``.
        batch_size: ``B``; the last batch of an epoch may be smaller.
        seed: Run seed; batch order is a function of ``(seed, round, client, epoch)``.
        lr: The optimizer's learning rate ``eta_l`` (read from the optimizer's defaults).
        precision: The Trainer's precision string; ``16-mixed`` adds a gradient scaler per client.
        max_parallel_clients: Most clients a vectorized engine trains at once (``None``: the cohort).
        step_lr: The learning rate of local step ``s`` of a round (``model.lr_scheduler_interval: step``),
            the same for every client and round; ``None``: the optimizer's rate at every step.
    """

    optimizer_factory: Callable[[Iterable[Tensor]], Optimizer]
    local_epochs: int
    batch_size: int
    seed: int
    lr: float
    precision: str = "32-true"
    max_parallel_clients: int | None = None
    step_lr: Callable[[int], float] | None = None


def num_local_steps(num_samples: Tensor, local_epochs: int, batch_size: int) -> Tensor:
    """``tau_k = E * ceil(n_k / B)`` for every client."""
    return local_epochs * torch.div(num_samples + batch_size - 1, batch_size, rounding_mode="floor")


def fixed_minibatches(num_samples: Tensor, batch_size: int, minibatches: int, batch_repeats: int = 1
                      ) -> tuple[int, Tensor]:
    """``(local_epochs, num_steps)`` of a pass in which every client draws exactly ``minibatches`` minibatches.

    The pFedMe code's ``local_epochs`` counts minibatches, not epochs: a client cycles through its
    epochs (each a fresh permutation here) until it has drawn ``minibatches`` of them, each stepped
    ``batch_repeats`` times. The epochs are enough for the client with the fewest minibatches per epoch.

    Example:
        >>> fixed_minibatches(torch.tensor([45, 250]), 20, 5, batch_repeats=2)
        (2, tensor([10, 10]))
    """
    per_epoch = torch.div(num_samples + batch_size - 1, batch_size, rounding_mode="floor").clamp_min(1)
    epochs = -(-minibatches // int(per_epoch.min())) if len(num_samples) else 1
    return epochs, torch.full_like(num_samples, minibatches * batch_repeats)


def distinct_steps(num_steps: Tensor, batch_repeats: int) -> Tensor:
    """Minibatches drawn in ``num_steps`` local steps when every minibatch is stepped ``batch_repeats`` times.

    Example:
        >>> distinct_steps(torch.tensor([10, 11, 3]), 5).tolist()
        [2, 3, 1]
    """
    return num_steps if batch_repeats == 1 else torch.div(num_steps + batch_repeats - 1, batch_repeats,
                                                           rounding_mode="floor")


def final_epoch_samples(num_samples: Tensor, num_steps: Tensor, batch_size: int) -> Tensor:
    """Samples in the steps of each client's last epoch, complete or not (``train_acc``/``train_loss``'s denominator).

    Example:
        >>> final_epoch_samples(torch.tensor([25, 25, 25]), torch.tensor([3, 5, 2]), 10).tolist()
        [25, 20, 20]
    """
    per_epoch = torch.div(num_samples + batch_size - 1, batch_size, rounding_mode="floor")
    done = num_steps - (num_steps - 1) // per_epoch * per_epoch  # steps taken in the last epoch
    return torch.minimum(num_samples, done * batch_size)


def epoch_permutation(seed: int, round_idx: int, client_id: int, epoch: int, num_samples: int,
                      sub_round: int = 0, stream: str = "train") -> Tensor:
    """The sample order of one client's local epoch; identical in every engine and on resume.

    ``sub_round`` distinguishes the institution rounds inside one global iteration of the hierarchy;
    ``stream`` the passes of personalization (``personal``, ``eval_ft``) from the training pass.
    """
    keys = ((seed, "batches", round_idx, client_id, epoch) + ((sub_round,) if sub_round else ())
            + ((stream,) if stream != "train" else ()))
    return torch.randperm(num_samples, generator=generator_for(*keys))


def output_rows(ctx_start_rows: Tensor | None, num_clients: int, numel: int, device: torch.device) -> Tensor:
    """The ``(K, d)`` tensor an engine writes the trained rows into: the start rows themselves when given.

    Client ``k``'s start row is read before it trains and its trained row written after, so one tensor
    serves both: a personalization pass of ``K`` model-sized rows holds one cohort tensor, not two
    (``train_cohort``'s ``start_rows`` are consumed).
    """
    if ctx_start_rows is not None and ctx_start_rows.dtype == torch.float32 and ctx_start_rows.device == device:
        return ctx_start_rows
    return torch.empty(num_clients, numel, device=device)


class ClientEngine(ABC):
    """Trains a cohort of clients from the global model and returns their stacked results.

    Subclasses implement :meth:`_train`; :meth:`train_cohort` adds what every engine reports
    (sample and step counts, label histograms, ``loss_before`` and ``trained_acc`` when a hook asks
    for them).

    Args:
        plan: Local training configuration.
    """

    name = "engine"

    def __init__(self, plan: LocalTrainingPlan) -> None:
        self.plan = plan
        self.model: ClientModule | None = None
        self.data: FederatedData | None = None
        self.store: ClientStateStore | None = None
        self.layout: FlatStateLayout | None = None
        self.source: ClientData | None = None
        self._rows: dict[int, int] | None = None

    def setup(self, model: ClientModule, data: FederatedData, store: ClientStateStore,
              source: ClientData | None = None) -> None:
        """Bind the global model (whose weights are ``w^t`` at each call), client data and client state.

        ``source``: a lazy federation; then ``data`` holds a few clients for the set-up checks only and
        every training call needs its clients staged first (:meth:`stage`). ``None``: ``data`` holds
        every client and is read by client id.
        """
        self.model, self.data, self.store, self.source = model, data, store, source
        self.layout = FlatStateLayout(model.state_dict())
        self._rows = None if source is None else {}
        self._label_hist = data.label_histograms("train").cpu()

    def stage(self, client_ids: Tensor) -> None:
        """Produce the samples of ``client_ids`` on the model's device; the next trainings read them by position.

        Only with a lazy ``source``; the clients trained next (any subset of ``client_ids``, in any
        order) are looked up in the staged federation, whose row ``i`` is ``client_ids[i]``.
        """
        staged = self.source.stage(client_ids, "train", self.model.device)
        self.bind(staged, client_ids)

    def bind(self, data: FederatedData, client_ids: Tensor) -> None:
        """Read the clients ``client_ids`` from ``data``, whose row ``i`` holds ``client_ids[i]``'s samples."""
        self.data = data
        self._rows = {k: i for i, k in enumerate(client_ids.tolist())}
        self._label_hist = data.label_histograms("train").cpu()

    def rows(self, client_ids: Tensor) -> Tensor:
        """Where ``client_ids``' samples are in ``self.data``: the ids themselves, or their staged positions."""
        if self._rows is None:
            return client_ids
        try:
            return torch.tensor([self._rows[k] for k in client_ids.tolist()], dtype=torch.long)
        except KeyError as missing:
            raise RuntimeError(f"client {missing} is not staged; stage the cohort before training it") from None

    def train_cohort(self, round_idx: int, client_ids: Tensor, participation: Tensor, hooks: ClientHookSet,
                     cohort_size: int | None = None, sub_round: int = 0, local_epochs: int | None = None,
                     loss_before: Tensor | None = None, num_steps: Tensor | None = None,
                     start_rows: Tensor | None = None, frozen: frozenset[str] = frozenset(),
                     stream: str = "train", batch_repeats: int = 1) -> CohortUpdate:
        """Train ``client_ids`` from the current global model.

        Args:
            round_idx: The round ``t``.
            client_ids: ``(K,)`` sorted client ids.
            participation: ``(K,)`` participation counts including this round.
            hooks: Client-side algorithm hooks.
            cohort_size: ``K`` as the hooks should see it (defaults to ``len(client_ids)``).
            sub_round: Institution round within a global iteration (hierarchy mode; 0 otherwise).
            local_epochs: Override of ``plan.local_epochs`` for this call (Tempo's adaptive epochs).
            loss_before: ``loss_before_k`` already measured (a shard of a cohort measured as a whole);
                ``None``: measured here when a hook asks for it.
            num_steps: ``(K,)`` local steps each client takes, at most ``tau_k`` (partial work of
                stragglers under ``model.system``); ``None``: ``tau_k`` for every client. A client
                that stops early reports the samples it saw as ``n_k`` and statistics over the
                steps of its last (possibly incomplete) epoch.
            start_rows: ``(K, d)`` flat state each client starts from instead of ``w^t`` (personal
                models; docs/algorithms.md, Personalization); integer buffers still come from ``w^t``.
                Consumed: the engine writes the trained rows into it (the update's ``weights``).
            frozen: Parameter names this pass never steps (their gradients are dropped before the step).
            stream: Batch-order stream (``train``; ``personal`` and ``eval_ft`` draw other orders).
            batch_repeats: Local steps taken on each minibatch before the next is drawn (pFedMe's ``K``
                inner steps on one minibatch). Steps, ``tau_k`` and ``num_steps`` count every repeat, so
                ``tau_k = batch_repeats * E * ceil(n_k / B)``; ``train_acc``/``train_loss`` count each
                minibatch once (its first repeat).
        """
        if batch_repeats < 1:
            raise ValueError(f"batch_repeats must be >= 1, got {batch_repeats}")
        if local_epochs is not None and local_epochs != self.plan.local_epochs:
            saved, self.plan = self.plan, replace(self.plan, local_epochs=local_epochs)
            try:
                return self.train_cohort(round_idx, client_ids, participation, hooks, cohort_size, sub_round,
                                         loss_before=loss_before, num_steps=num_steps, start_rows=start_rows,
                                         frozen=frozen, stream=stream, batch_repeats=batch_repeats)
            finally:
                self.plan = saved
        rows = self.rows(client_ids)  # where their samples are in self.data
        num_samples = self.data.train_sizes().cpu()[rows]
        full_steps = batch_repeats * num_local_steps(num_samples, self.plan.local_epochs, self.plan.batch_size)
        if num_steps is None:
            num_steps = full_steps
        elif bool((num_steps > full_steps).any() or (num_steps < 1).any()):
            raise ValueError("num_steps must be between 1 and tau_k for every client")
        else:
            num_steps = num_steps.cpu().long()
            num_samples = samples_seen(num_samples, distinct_steps(num_steps, batch_repeats), self.plan.batch_size)
        if len(client_ids) == 0:  # a rank whose share of a small cohort is empty
            return CohortUpdate(
                round_idx=round_idx, client_ids=client_ids, weights=torch.empty(0, self.layout.numel,
                                                                                device=self.model.device),
                int_state={}, num_samples=num_samples, num_steps=num_steps,
                train_acc=torch.zeros(0, dtype=torch.float64), train_loss=torch.zeros(0, dtype=torch.float64),
                participation=participation, label_hist=self._label_hist[rows],
                loss_before=torch.zeros(0, dtype=torch.float64) if hooks.requires_loss_before else None,
                trained_acc=torch.zeros(0, dtype=torch.float64) if hooks.requires_trained_accuracy else None)
        if loss_before is None and hooks.requires_loss_before:
            loss_before = client_train_losses(self.model, self.data, rows)
        ctx = LocalTrainingContext(
            round_idx=round_idx, client_ids=client_ids, cohort_size=cohort_size or len(client_ids), num_steps=num_steps,
            global_params={n: p.detach() for n, p in self.model.named_parameters()}, lr=self.plan.lr,
            sub_round=sub_round, layout=self.layout, start_rows=start_rows, frozen=frozenset(frozen), stream=stream,
            batch_repeats=batch_repeats,
        )
        weights, int_state, train_acc, train_loss, extra = self._train(ctx, hooks)
        # After what each client actually did (a straggler's partial work too), on its full train split.
        trained_acc = self._trained_accuracy(client_ids, weights) if hooks.requires_trained_accuracy else None
        return CohortUpdate(
            round_idx=round_idx, client_ids=client_ids, weights=weights, int_state=int_state,
            num_samples=num_samples, num_steps=num_steps, train_acc=train_acc, train_loss=train_loss,
            participation=participation, label_hist=self._label_hist[rows], loss_before=loss_before,
            trained_acc=trained_acc, extra=extra,
        )

    def _trained_accuracy(self, client_ids: Tensor, weights: Tensor) -> Tensor:
        """``(K,)`` float64 accuracy of each trained row of ``weights`` on its client's full train split."""
        return trained_accuracies(self.model, self.layout, weights, self.data, self.rows(client_ids))

    @abstractmethod
    def _train(self, ctx: LocalTrainingContext, hooks: ClientHookSet
               ) -> tuple[Tensor, dict[str, Tensor], Tensor, Tensor, dict[str, Tensor]]:
        """Train the clients of ``ctx``; return ``(weights (K, d), int_state, train_acc, train_loss, extra)``."""

    def _make_scaler(self) -> torch.amp.GradScaler | None:
        # fp16 gradients underflow without loss scaling; bf16 has fp32's range and needs none.
        if self.plan.precision in ("16-mixed", "16"):
            return torch.amp.GradScaler(self.model.device.type)
        return None

    @staticmethod
    def _num_batches(num_samples: int, batch_size: int) -> int:
        return math.ceil(num_samples / batch_size)
