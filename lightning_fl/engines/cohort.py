"""What client engines hand to client-side hooks and what they return to the server."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from lightning_fl.functional.weights import weighted_average
from lightning_fl.state.flat_state import FlatStateLayout


@dataclass
class LocalTrainingContext:
    """The clients an engine is training right now, as seen by client-side hooks.

    Every per-client tensor has a leading dimension ``C``: the clients trained together (1 in the
    sequential engine, a chunk of the cohort in the vectorized one), so one hook implementation
    serves both engines.

    Attributes:
        round_idx: The round ``t`` (0-based).
        client_ids: ``(C,)`` ids of the clients being trained.
        cohort_size: ``K``, the size of the whole cohort this round.
        num_steps: ``(C,)`` local optimizer steps ``tau_k`` each client takes this round.
        global_params: Trainable parameters of ``w^t`` by name (no leading dimension, fp32).
        lr: The client optimizer's learning rate ``eta_l``.
        step: Index of the local step being taken (0-based), updated by the engine.
        cache: Scratch space for hooks (e.g. a stacked control variate for these clients).
        sub_round: Institution round inside a hierarchical global iteration (0 in the flat loop).
        layout: The flat layout of the model state (to shape flat per-client state per parameter).
        active: ``(C,)`` bool on the training device: which clients still take local steps. The
            vectorized engine trains clients with different ``tau_k`` together and clears a client's
            entry once it has taken its ``tau_k`` steps (it then keeps the client's parameters and
            optimizer state fixed, whatever a hook writes to its rows). ``None`` (sequential engine):
            every client in ``ctx`` is stepping.
        start_rows: ``(C, d)`` flat state each client starts from (a personal model, or ``w^t`` with a
            client's personal part in place); ``None``: every client starts from ``w^t``.
        frozen: Parameter names no optimizer step may change in this pass (FedRep's head or body phase).
        stream: The batch-order stream: ``train``, ``personal`` (a personal pass) or ``eval_ft``
            (evaluation-time fine-tuning); streams other than ``train`` never repeat its batches.
        step_lr: The learning rate of the local step being taken (set by the engine each step: ``lr``, or
            the per-step schedule's rate under ``model.lr_scheduler_interval: step``).
        batch_repeats: Local steps taken on each minibatch (pFedMe's ``K``); ``step`` and ``num_steps``
            count every repeat, so step ``s`` is repeat ``s % batch_repeats`` of minibatch
            ``s // batch_repeats``.
    """

    round_idx: int
    client_ids: Tensor
    cohort_size: int
    num_steps: Tensor
    global_params: dict[str, Tensor]
    lr: float
    step: int = 0
    cache: dict[str, Any] = field(default_factory=dict)
    sub_round: int = 0
    layout: FlatStateLayout | None = None
    active: Tensor | None = None
    start_rows: Tensor | None = None
    frozen: frozenset[str] = frozenset()
    stream: str = "train"
    batch_repeats: int = 1
    step_lr: float | None = None

    @property
    def num_clients(self) -> int:
        return len(self.client_ids)

    def active_mask(self) -> Tensor:
        """``(C,)`` bool: the clients still taking steps (all of them when the engine does not say)."""
        if self.active is not None:
            return self.active
        device = next(iter(self.global_params.values())).device if self.global_params else self.num_steps.device
        return torch.ones(self.num_clients, dtype=torch.bool, device=device)


@dataclass
class CohortUpdate:
    """The cohort's results of one round, stacked along a leading cohort dimension ``K``.

    Attributes:
        round_idx: The round ``t``.
        client_ids: ``(K,)`` client ids (sorted).
        weights: ``(K, d)`` fp32: each client's final floating-point state ``y_k``, flattened
            (``None`` with ``model.exchange: reduce``: see :meth:`weighted_sum`).
        int_state: Non-floating state entries (e.g. BatchNorm counters) of the first cohort member.
        num_samples: ``(K,)`` ``n_k``.
        num_steps: ``(K,)`` ``tau_k``.
        train_acc: ``(K,)`` accuracy over the samples seen in the final local epoch.
        train_loss: ``(K,)`` mean loss over the final local epoch.
        participation: ``(K,)`` number of rounds each client has been in a cohort, this one included.
        label_hist: ``(K, C)`` label histograms of the clients' train splits.
        loss_before: ``(K,)`` loss of ``w^t`` on each client's train split, only when a callback
            asked for it (q-FFL); ``None`` otherwise.
        trained_acc: ``(K,)`` float64 accuracy of each trained ``y_k`` on the client's full train
            split, measured after training, only when a callback asked for it (FedFa); ``None`` otherwise.
        extra: Per-client tensors returned by hooks' ``on_local_train_end`` (stacked to ``(K, ...)``).
        reduce_rows: With ``model.exchange: reduce`` over several processes, ``weights`` is ``None`` and
            this computes ``sum_k c_k y_k`` from every rank's own rows (one all-reduce); use
            :meth:`weighted_sum`.
        finite: ``(K,)`` bool, whether each client's weights are all finite, when ``weights`` is ``None``.
    """

    round_idx: int
    client_ids: Tensor
    weights: Tensor
    int_state: dict[str, Tensor]
    num_samples: Tensor
    num_steps: Tensor
    train_acc: Tensor
    train_loss: Tensor
    participation: Tensor
    label_hist: Tensor
    loss_before: Tensor | None = None
    trained_acc: Tensor | None = None
    extra: dict[str, Tensor] = field(default_factory=dict)
    reduce_rows: Callable[[Tensor], Tensor] | None = None
    finite: Tensor | None = None

    @property
    def cohort_size(self) -> int:
        return len(self.client_ids)

    def weighted_sum(self, coefficients: Tensor) -> Tensor:
        """``sum_k c_k y_k``, ``(d,)``, for ``(K,)`` coefficients in cohort order.

        From the cohort's weights when this process holds them (bitwise the single-process result);
        otherwise through :attr:`reduce_rows` (each rank sums its own clients, then one all-reduce:
        equal to float rounding).
        """
        if self.weights is not None:
            return weighted_average(self.weights, coefficients)
        return self.reduce_rows(coefficients)

    def non_finite_clients(self) -> list[tuple[int, str]]:
        """Every client whose loss or weights are NaN/inf, with what went wrong, in cohort order."""
        bad_loss = ~torch.isfinite(self.train_loss)
        if self.weights is None:
            bad_weights = ~self.finite
        else:  # a few rows at a time: isfinite over all (K, d) at once costs almost twice the weights
            bad_weights = torch.cat([~torch.isfinite(rows).all(dim=1) for rows in self.weights.split(16)]
                                    ) if len(self.weights) else torch.zeros(0, dtype=torch.bool)
        bad = (bad_loss | bad_weights.to(bad_loss.device)).nonzero().flatten().tolist()
        return [(int(self.client_ids[k]), f"train loss {float(self.train_loss[k])}" if bool(bad_loss[k])
                 else "non-finite weights") for k in bad]

    def first_non_finite_client(self) -> tuple[int, str] | None:
        """The first client whose loss or weights are NaN/inf, with what went wrong, else ``None``."""
        bad = self.non_finite_clients()
        return bad[0] if bad else None

    def select(self, keep: Tensor) -> CohortUpdate:
        """The update of the clients where ``keep`` (``(K,)`` bool) is set, in cohort order.

        With ``model.exchange: reduce`` the other clients' rows stay on their ranks and are left out
        of every weighted sum (a zero coefficient would still turn a NaN row into a NaN sum).
        """
        rows = keep.nonzero().flatten()
        cpu_rows = rows.cpu()

        def pick(value: Tensor | None) -> Tensor | None:
            return None if value is None else value[rows.to(value.device)]

        reduce_rows = None
        if self.reduce_rows is not None:
            full_reduce, size = self.reduce_rows, len(keep)

            def reduce_rows(coefficients: Tensor) -> Tensor:
                full = coefficients.new_zeros(size)
                full[cpu_rows.to(full.device)] = coefficients
                return full_reduce(full)

        return CohortUpdate(
            round_idx=self.round_idx, client_ids=self.client_ids[cpu_rows], weights=pick(self.weights),
            int_state=self.int_state, num_samples=self.num_samples[cpu_rows], num_steps=self.num_steps[cpu_rows],
            train_acc=self.train_acc[cpu_rows], train_loss=self.train_loss[cpu_rows],
            participation=self.participation[cpu_rows], label_hist=self.label_hist[cpu_rows],
            loss_before=pick(self.loss_before),
            trained_acc=None if self.trained_acc is None else self.trained_acc[cpu_rows], extra={k: pick(v) for k, v in self.extra.items()},
            reduce_rows=reduce_rows, finite=pick(self.finite))
