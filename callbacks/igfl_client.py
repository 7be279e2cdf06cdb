"""IGFL-C: the IGFL client correction with a FedAvg server (docs/algorithms.md, IGFL-C, Algorithm 2).

Also home of what every IGFL callback shares: :class:`IGFLState` (``dW_ps`` and each client's
``dW_k_prev``) and :class:`IGFLClientHooks` (the per-step correction on ``(C, ...)`` tensors).
"""

from __future__ import annotations

import torch
from lightning_fl.callbacks.fedavg import FedAvg
from torch import Tensor
from typing_extensions import override

from lightning_fl.engines.cohort import CohortUpdate, LocalTrainingContext
from lightning_fl.functional.igfl import igfl_client_correction
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.federation import Federation

_CACHE_CONSTANT = "igfl/constant"


class IGFLState:
    """Mixin: IGFL's declared state across rounds (docs/algorithms.md, IGFL-C), shared by every IGFL callback.

    ``server_delta`` is ``dW_ps = w^t - w^{t-1}`` as a flat ``(d,)`` vector (``None`` means zeros:
    round 0); ``prev_delta`` holds per client ``dW_k_prev = y_k - w`` of its last participation
    (zeros for a client that never participated). IGFL-S in ``self``/``global`` mode does not need
    the client deltas and does not record them (``keeps_client_deltas``).
    """

    keeps_client_deltas: bool = True

    def declare_igfl_state(self) -> None:
        self.add_server_state("server_delta")
        self.add_client_state("prev_delta", shape="model", default=0.0)

    def server_delta_like(self, like: Tensor) -> Tensor:
        """``dW_ps`` (zeros before the first aggregation), dtype/device of ``like`` (d,)."""
        if self.server_delta is None:
            return torch.zeros_like(like)
        return self.server_delta.to(device=like.device, dtype=like.dtype)

    def record(self, global_w: Tensor, new_w: Tensor, client_ids: Tensor, client_w: Tensor) -> None:
        """After aggregation: ``dW_k_prev <- y_k - w^t`` for the cohort, ``dW_ps <- w^{t+1} - w^t``."""
        self.server_delta = (new_w - global_w).detach().clone()
        if self.keeps_client_deltas:
            self.prev_delta.scatter(client_ids, client_w - global_w)


class IGFLClientHooks:
    """Mixin: IGFL-C's per-step correction (Algorithm 2) for a callback with :class:`IGFLState`.

    Written on ``(C, ...)`` tensors only, so it runs unchanged in the sequential (``C == 1``) and
    vectorized engines. ``on_local_train_start`` reads the chunk's ``dW_k_prev`` and ``dW_ps``, shaped
    per trainable parameter, and caches the step-independent part of the correction,
    ``- dW_k_prev / (K T) + dW_ps / T``, in ``ctx.cache``; ``after_local_step`` adds
    ``D_G = (1/K) (D_I - dW_k_prev / T) + dW_ps / T`` to the parameters in place (``D_I`` the step the
    client optimizer just took, ``K = ctx.cohort_size``, ``T = ctx.num_steps``). Floating-point
    buffers (e.g. BatchNorm statistics) are not optimizer steps and are not corrected. The flat
    layout comes from the loop, kept by Lightning's ``setup`` hook (and refreshed every round).
    """

    #: ``K`` of the correction when it must not be the realised cohort size (DP-safe IGFL-C: ``qN``).
    expected_cohort: int | None = None

    def group_size(self, ctx: LocalTrainingContext) -> int:
        """``K``: the cohort size, or the expected cohort ``qN`` of DP-safe IGFL-C (the realised one couples clients)."""
        return ctx.cohort_size if self.expected_cohort is None else self.expected_cohort

    def on_local_train_start(self, ctx: LocalTrainingContext) -> None:
        layout = ctx.layout
        like = next(iter(ctx.global_params.values()))
        flat_like = torch.empty(layout.numel, dtype=torch.float32, device=like.device)
        prev = self.prev_delta.gather_by_entry(ctx.client_ids, layout, like.device)
        server = layout.unflatten(self.server_delta_like(flat_like))
        # D_G = D_I / K + [(0 - dW_k_prev / T) / K + dW_ps / T]: the bracket is constant during local
        # training, so it is computed once here with the same function (D_I = 0), and each step only
        # adds D_I / K to it (algebraically the documented formula; about 8x cheaper per step).
        constant = {}
        for name, value in ctx.global_params.items():
            p = prev[name].to(value.dtype)
            constant[name] = igfl_client_correction(torch.zeros_like(p), p, server[name].to(value.dtype), ctx.num_steps,
                                                    self.group_size(ctx))
        ctx.cache[_CACHE_CONSTANT] = constant

    def after_local_step(self, ctx: LocalTrainingContext, params: dict[str, Tensor],
                         step_delta: dict[str, Tensor]) -> None:
        constant = ctx.cache[_CACHE_CONSTANT]
        inv_k = 1.0 / self.group_size(ctx)
        with torch.no_grad():
            for name, value in params.items():
                value.add_(torch.add(constant[name], step_delta[name], alpha=inv_k))  # += D_G


class IGFLClient(IGFLClientHooks, IGFLState, FedAvg):
    """IGFL-C (IJCAI 2021, Algorithm 2): group-behaviour correction of every local step, FedAvg server.

    docs/algorithms.md, IGFL-C. State: ``dW_ps = w^t - w^{t-1}`` (zeros at ``t = 0``) and per client
    ``dW_k_prev = y_k - w`` of its last participation (zeros if none). Client ``k`` with ``T = tau_k``
    local steps in a cohort of ``K``: after each optimizer step ``D_I = w_after - w_before``
    (``-eta_l g`` for plain SGD) the parameters get ``D_G = (1/K) (D_I - dW_k_prev / T) + dW_ps / T``
    added, so the step is ``D_I + D_G``. The server is :class:`~lightning_fl.callbacks.FedAvg`
    (``w^{t+1} = sum_k n_k y_k / sum n``); after aggregation ``dW_k_prev <- y_k - w^t`` for the
    cohort and ``dW_ps <- w^{t+1} - w^t``.

    Readings:

    - IGFL-C is an aggregation callback (FedAvg + the client hooks) so that it is one YAML entry;
      :class:`~lightning_fl.callbacks.IGFLServer` and :class:`~lightning_fl.callbacks.IGFL` are the other two variants.
    - ``D_I`` is whatever step the configured optimizer took (with momentum or weight decay it is not
      ``-eta_l g``); the paper uses plain SGD.
    - ``T`` is the number of local steps the client takes this round (``E * ceil(n_k / B)``), so
      clients with more data spread ``dW_ps`` over more steps.
    - Only trainable parameters are corrected; ``dW_k_prev``/``dW_ps`` are kept for the whole flat
      state (floating buffers included). The store holds one ``(d,)`` vector per client that has
      participated, on the global model's device, and is checkpointed (exact resume).
    - The state is updated in :meth:`aggregate`, right after ``w^{t+1}`` is computed.

    Args:
        weighting: FedAvg server weighting: ``samples`` (default) or ``uniform``.
        dp_safe: The DP-safe variant (docs/algorithms.md, Client-level differential privacy): ``K :=
            model.clients_per_round`` (the expected cohort ``qN``) in the correction instead of the realised cohort
            size, which would couple the clients; it reads only the public ``w^t - w^{t-1}`` and the client's own
            previous delta, so ``model.dp`` may wrap it like FedAvg.

    Raises:
        ConfigError: If ``weighting`` is unknown.

    Example (YAML)::

        - class_path: lightning_fl.callbacks.IGFLClient
    """

    supports_hierarchy = False  # the hooks need per-client deltas, not institution models
    supports_reduce = False  # records every client's delta

    def __init__(self, weighting: str = "samples", dp_safe: bool = False) -> None:
        super().__init__(weighting)
        self.dp_safe = bool(dp_safe)
        self.declare_igfl_state()

    @override
    def on_federation_setup(self, federation: Federation) -> None:
        super().on_federation_setup(federation)
        self.expected_cohort = federation.clients_per_round if self.dp_safe else None

    @override
    def aggregate(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                  log: RoundLogger) -> Tensor:
        new_w = super().aggregate(round_idx, global_w, update, federation, log)
        self.record(global_w, new_w, update.client_ids, update.weights)
        return new_w
