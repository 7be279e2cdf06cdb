"""SCAFFOLD: control variates that correct client drift (SPEC section 2, option II)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_warn
from torch import Tensor
from typing_extensions import override

from lightning_fl.callbacks._common import (
    clone_or_none,
    describe_optimizer,
    is_plain_sgd,
    log_server_scalars,
    probe_client_optimizer,
)
from lightning_fl.callback import AggregationCallback
from lightning_fl.engines.cohort import CohortUpdate, LocalTrainingContext
from lightning_fl.flat_state import FlatStateLayout
from lightning_fl.functional.scaffold import scaffold_client_control, scaffold_correct_grad, scaffold_server_step
from lightning_fl.validation import check_positive

if TYPE_CHECKING:
    from lightning_fl.loop import FederatedLoop

_CACHE_KEY = "scaffold"


class Scaffold(AggregationCallback):
    """SCAFFOLD (Karimireddy et al. 2020) with option II control variates.

    SPEC section 2. State: a server control ``c`` and one control ``c_k`` per client, all zeros at
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
    - Storage: ``c`` and the controls of the clients seen so far (a dict ``client id -> (d,)``) are
      fp32 on the global model's device and are checkpointed, so a resumed run continues exactly
      (after loading they move to the model's device at first use).
    - The server needs every client's update, so SCAFFOLD does not run in hierarchy mode.

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

    def __init__(self, server_lr: float = 1.0) -> None:
        super().__init__()
        check_positive("server_lr", server_lr)
        self.server_lr = float(server_lr)
        self.control: Tensor | None = None
        self.client_controls: dict[int, Tensor] = {}
        self.layout: FlatStateLayout | None = None
        self._trainable: set[str] | None = None

    # ------------------------------------------------------------------ set-up
    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: FederatedLoop) -> None:
        self.bind(pl_module.layout, (n for n, p in pl_module.model.named_parameters() if p.requires_grad))
        optimizer = probe_client_optimizer(pl_module)
        if not is_plain_sgd(optimizer):
            self._warn_once("optimizer", f"SCAFFOLD's option II control update assumes plain SGD; the client optimizer"
                           f" is {describe_optimizer(optimizer)}, so c_k+ uses lr={pl_module.client_lr} as eta_l"
                           " (an approximation)")

    def bind(self, layout: FlatStateLayout, trainable: Iterable[str]) -> None:
        """Set the flat layout of the model state and the names of its trainable parameters.

        Called at the start of training; tests that drive an engine directly call it themselves.
        """
        self.layout = layout
        self._trainable = set(trainable)

    def _warn_once(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            rank_zero_warn(message)

    # ------------------------------------------------------------------ client side
    @override
    def on_local_train_start(self, ctx: LocalTrainingContext) -> None:
        if self.layout is None:
            raise RuntimeError("Scaffold.bind(layout, trainable) must run before local training (on_fit_start does)")
        ids = ctx.client_ids.tolist()
        if self.control is None and not any(k in self.client_controls for k in ids):
            ctx.cache[_CACHE_KEY] = None  # every control is 0: nothing to correct
            return
        like = next(iter(ctx.global_params.values()))
        c = self._server_control(like)
        c_k = torch.stack([self._client_control(k, like) for k in ids])
        c_by_name, c_k_by_name = self.layout.unflatten(c), self.layout.unflatten(c_k)
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
    def aggregate(self, trainer: pl.Trainer, loop: FederatedLoop, round_idx: int, global_w: Tensor,
                  update: CohortUpdate) -> Tensor:
        if self.layout is not loop.layout:
            self.bind(loop.layout, (n for n, p in loop.model.named_parameters() if p.requires_grad))
        ids = update.client_ids.tolist()
        c = self._server_control(global_w)
        c_k = torch.stack([self._client_control(k, global_w) for k in ids])
        c_k_plus = scaffold_client_control(c_k, c, global_w, update.weights, update.num_steps, loop.client_lr)
        # Buffers and frozen parameters have no gradient: their control entries stay 0.
        c_k_plus = torch.where(self._trainable_mask(global_w), c_k_plus, torch.zeros_like(c_k_plus))
        new_w, self.control = scaffold_server_step(global_w, update.weights, c, c_k_plus - c_k,
                                                   loop.data.num_clients, self.server_lr)
        for row, k in enumerate(ids):
            self.client_controls[k] = c_k_plus[row].clone()
        log_server_scalars(loop, round_idx, {"server/control_norm": float(torch.linalg.vector_norm(self.control))})
        return new_w

    def _trainable_mask(self, like: Tensor) -> Tensor:
        """``(d,)`` bool: the flat entries of trainable parameters (the only ones with a control)."""
        mask = torch.zeros(self.layout.numel, dtype=torch.bool, device=like.device)
        for entry in self.layout.float_entries:
            if entry.name in self._trainable:
                mask[entry.start : entry.stop] = True
        return mask

    def _server_control(self, like: Tensor) -> Tensor:
        if self.control is None:
            return torch.zeros(self.layout.numel, dtype=torch.float32, device=like.device)
        if self.control.device != like.device:
            self.control = self.control.to(like.device)
        return self.control

    def _client_control(self, client_id: int, like: Tensor) -> Tensor:
        control = self.client_controls.get(client_id)
        if control is None:
            return torch.zeros(self.layout.numel, dtype=torch.float32, device=like.device)
        if control.device != like.device:
            control = self.client_controls[client_id] = control.to(like.device)
        return control

    # ------------------------------------------------------------------ checkpoint
    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "control": clone_or_none(self.control),
            "client_controls": {k: v.detach().clone() for k, v in self.client_controls.items()},
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.control = clone_or_none(state_dict.get("control"))
        self.client_controls = {int(k): v.detach().clone() for k, v in state_dict.get("client_controls", {}).items()}
