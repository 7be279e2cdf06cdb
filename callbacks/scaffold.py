"""SCAFFOLD: control variates that correct client drift (docs/algorithms.md, SCAFFOLD, option II)."""

from __future__ import annotations

import torch
from torch import Tensor
from typing_extensions import override

from lightning_fl.aggregation.pipeline import Combination
from lightning_fl.engines.cohort import CohortUpdate, LocalTrainingContext
from lightning_fl.faults.validation import check_positive
from lightning_fl.functional.scaffold import (
    scaffold_client_control,
    scaffold_correct_grad,
    scaffold_server_step,
)
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import AggregationCallback
from lightning_fl.simulation.federation import Federation

_CACHE_KEY = "scaffold"


class Scaffold(AggregationCallback):
    """SCAFFOLD (Karimireddy et al. 2020) with option II control variates.

    docs/algorithms.md, SCAFFOLD. State: a server control ``c`` and one control ``c_k`` per client, all zeros at
    start.

    - Client, every local step: the gradient ``g`` of the local loss is replaced by ``g - c_k + c``
      before the optimizer step (client hook ``correct_local_gradients``, on cohort-stacked tensors).
    - After the round, with client learning rate ``eta_l`` (``model.optimizer.init_args.lr``) and
      ``tau_k`` local steps: ``c_k+ = c_k - c + (w^t - y_k) / (tau_k eta_l)``.
    - Server: ``w^{t+1} = w^t + eta_g mean_k (y_k - w^t)`` (unweighted over the cohort) and
      ``c <- c + (1/N) sum_k (c_k+ - c_k)`` with ``N`` the total number of clients; ``c_k <- c_k+``.

    Math: :mod:`lightning_fl.functional.scaffold`.

    Readings and notes:

    - Controls live in the flat layout of the model's floating-point state. Only trainable
      parameters have a gradient: the entries of buffers (e.g. BatchNorm running statistics) and of
      frozen parameters stay exactly 0 in ``c`` and every ``c_k``. Buffers are averaged like the
      parameters (``w^t + eta_g mean_k (y_k - w^t)``).
    - **Plain SGD assumed.** The option II rule estimates the client gradient as
      ``(w^t - y_k) / (tau_k eta_l)``, which is exact only for SGD without momentum. With a momentum
      (or non-SGD) client optimizer the run goes on with the configured ``lr`` as ``eta_l`` and a
      warning is logged once at the start of training.
    - A client seen for the first time has ``c_k = 0``; a client that took no local step
      (``tau_k = 0``) keeps its ``c_k``.
    - Storage: ``c`` is declared server state and ``c_k`` declared per-client state (a ``(d,)`` fp32
      row per client seen so far, in memory or on disk with ``model.client_state``); both are
      checkpointed, so a resumed run continues exactly.
    - The server needs every client's update, so SCAFFOLD does not run in hierarchy mode.
    - Communication: each client receives ``w^t`` and ``c`` and sends ``y_k`` and ``c_k+ - c_k``, two
      model-sized vectors each way (``vectors_down = vectors_up = 2``), twice FedAvg's traffic in
      :class:`~lightning_fl.callbacks.CommunicationCost` (docs/algorithms.md, Communication accounting).

    TensorBoard (step = round number ``t + 1``): ``server/control_norm`` (``||c||_2`` after the
    update).

    Args:
        server_lr: Global step size ``eta_g > 0``. Default 1.0.

    Raises:
        ConfigError: If ``server_lr <= 0``.

    Example (YAML)::

        model:
          optimizer: {class_path: torch.optim.SGD, init_args: {lr: 0.01}}
        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.Scaffold
              init_args: {server_lr: 1.0}
    """

    logged_scalars = ("server/control_norm",)

    vectors_down = 2  # w^t and c
    vectors_up = 2  # y_k and c_k+ - c_k
    own_server_optimizer = True  # x + eta_g (w_agg - x), beside the control-variate update

    def __init__(self, server_lr: float = 1.0) -> None:
        super().__init__()
        check_positive("server_lr", server_lr)
        self.server_lr = float(server_lr)
        self.add_server_state("control")  # c: (d,) after the first round, zeros before
        self.add_client_state("client_control", shape="model", default=0.0)  # c_k

    @override
    def on_federation_setup(self, federation: Federation) -> None:
        if not federation.optimizer.is_plain_sgd():
            self.warn_once("optimizer", f"SCAFFOLD's option II control update assumes plain SGD; the client optimizer"
                                        f" is {federation.optimizer.describe()}, so c_k+ uses"
                                        f" lr={federation.optimizer.lr} as eta_l (an approximation)")

    # ------------------------------------------------------------------ client side
    @override
    def on_local_train_start(self, ctx: LocalTrainingContext) -> None:
        if self.control is None and not any(self.client_control.seen(ctx.client_ids)):
            ctx.cache[_CACHE_KEY] = None  # every control is 0: nothing to correct
            return
        like = next(iter(ctx.global_params.values()))
        c = self._server_control(ctx.layout.numel, like.device)
        c_by_name = ctx.layout.unflatten(c)
        c_k_by_name = self.client_control.gather_by_entry(ctx.client_ids, ctx.layout, like.device)
        ctx.cache[_CACHE_KEY] = {name: (c_k_by_name[name], c_by_name[name]) for name in ctx.global_params}

    @override
    def correct_local_gradients(self, ctx: LocalTrainingContext, params: dict[str, Tensor],
                                grads: dict[str, Tensor]) -> None:
        controls = ctx.cache.get(_CACHE_KEY)
        if controls is None:
            return
        for name, grad in grads.items():
            c_k, c = controls[name]
            grad.copy_(scaffold_correct_grad(grad, c_k.to(grad.dtype), c.to(grad.dtype)))

    # ------------------------------------------------------------------ server side
    @override
    def aggregate(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                  log: RoundLogger) -> Tensor:
        c = self._server_control(federation.layout.numel, global_w.device)
        c_k = self.client_control.gather(update.client_ids, global_w.device)
        c_k_plus = scaffold_client_control(c_k, c, global_w, update.weights, update.num_steps, federation.optimizer.lr)
        # Buffers and frozen parameters have no gradient: their control entries stay 0.
        c_k_plus = torch.where(federation.trainable_mask(), c_k_plus, torch.zeros_like(c_k_plus))
        new_w, self.control = scaffold_server_step(global_w, update.weights, c, c_k_plus - c_k,
                                                   federation.num_clients, self.server_lr)
        if not self.pipeline.is_identity:  # x + eta_g (w_agg - x) with the pipeline's w_agg; c as before
            uniform = torch.full((update.cohort_size,), 1.0 / update.cohort_size, device=global_w.device)
            w_agg = self.combine(round_idx, global_w, update, Combination(uniform), federation, log)
            new_w = global_w + self.server_lr * (w_agg - global_w)
        self.client_control.scatter(update.client_ids, c_k_plus)
        log.log_scalars({"server/control_norm": float(torch.linalg.vector_norm(self.control))})
        return new_w

    def _server_control(self, numel: int, device: torch.device) -> Tensor:
        """``c`` on ``device`` (zeros before the first aggregation)."""
        if self.control is None:
            return torch.zeros(numel, dtype=torch.float32, device=device)
        return self.control.to(device)
