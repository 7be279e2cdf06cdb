"""APFL: a personal model mixed with the global one (docs/algorithms.md, Personalization, APFL)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
from torch import Tensor
from typing_extensions import override

from lightning_fl.callbacks.personalized import PersonalizedAggregation
from lightning_fl.engines.cohort import CohortUpdate, LocalTrainingContext
from lightning_fl.faults.validation import ConfigError, check_non_negative
from lightning_fl.functional.apfl import apfl_alpha_step, apfl_mix, apfl_personal_step
from lightning_fl.simulation.federation import Federation

_V, _ALPHA, _W = "apfl.v.", "apfl.alpha", "apfl.w"  # ctx.cache keys; _V and _ALPHA are also the extras' keys


def _keep_active(active: Tensor, new: Tensor, old: Tensor) -> Tensor:
    """``new`` in the rows of clients still training, ``old`` in the others (they have finished)."""
    return torch.where(active.view(-1, *[1] * (new.dim() - 1)), new, old)


class APFL(PersonalizedAggregation):
    """APFL (Deng et al. 2020, arXiv 2003.13461, Alg. 1): ``w`` trains as FedAvg, each client mixes in ``v_k``.

    Every local step on minibatch ``b``, from the pre-step values: ``w <- w - eta grad f_k(w; b)`` (the
    engine's step), ``vbar = alpha_k v_k + (1 - alpha_k) w``, ``v_k <- v_k - eta alpha_k grad f_k(vbar; b)``
    and ``alpha_k <- clip(alpha_k - eta <v_k - w, grad f_k(vbar; b)>, 0, 1)``. The engine supplies
    ``grad f_k(vbar; b)`` through the ``extra_gradient_point`` hook, so both engines train APFL. ``w`` is
    sent and ``n_k``-averaged; ``v_k`` (the declared ``personal`` state) and ``alpha_k`` (``alpha``) are
    kept per client. Evaluated: ``alpha_k v_k + (1 - alpha_k) w^{t+1}``. ``eta`` is the client
    optimizer's ``lr`` at the step (a per-step schedule's rate too); the optimizer must be plain SGD, since ``v_k``'s step is plain SGD at that rate.

    Args:
        alpha: ``alpha_k`` of a client that has not trained yet, in ``[0, 1]`` (0.5, FedTorch's default).
        adaptive_alpha: ``False`` keeps every ``alpha_k`` at ``alpha``.
        alpha_l2: Adds ``alpha_l2 alpha_k`` to alpha's gradient (FedTorch: 0.02; the paper: 0).
        weighting: Server weights ``samples`` (``n_k``) or ``uniform``.
        personal_init: Where ``v_k`` starts: ``received`` (the first ``w^t`` client ``k`` receives) or ``w0``.

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.APFL
              init_args: {alpha: 0.5}
        model:
          optimizer: {class_path: torch.optim.SGD, init_args: {lr: 0.05}}
          eval: {model: personal}
    """

    personal_part = "full"
    personal_in_global = False

    def __init__(self, alpha: float = 0.5, adaptive_alpha: bool = True, alpha_l2: float = 0.0,
                 weighting: str = "samples", personal_init: str = "received") -> None:
        super().__init__(weighting=weighting, personal_init=personal_init)
        if not 0.0 <= float(alpha) <= 1.0:
            raise ConfigError(f"APFL.alpha must be in [0, 1]; got {alpha}")
        check_non_negative("alpha_l2", alpha_l2)
        self.alpha_init, self.adaptive_alpha, self.alpha_l2 = float(alpha), bool(adaptive_alpha), float(alpha_l2)
        self.add_client_state("alpha", shape=(), default=self.alpha_init)  # alpha_k of every client seen
        self._trainable: tuple[str, ...] = ()
        self._cohort: tuple[dict[int, int], Tensor, Tensor] | None = None  # the round's ids, v rows and alphas

    @override
    def on_federation_setup(self, federation: Federation) -> None:
        super().on_federation_setup(federation)
        self.require_plain_sgd(federation, "steps v_k with plain SGD at the client lr, so w must step so too")
        if federation.batchnorm_entries:
            raise ConfigError("model.client: APFL cannot train a model with BatchNorm (the gradient at vbar would"
                              " move the running statistics); use a model without BatchNorm")
        if federation.hierarchy is not None:
            raise ConfigError("model.hierarchy: APFL trains flat rounds only; remove model.hierarchy")
        self._trainable = tuple(e.name for e in federation.layout.float_entries if e.name in federation.trainable)

    # ------------------------------------------------------------------ client hooks
    @override
    def on_local_train_start(self, ctx: LocalTrainingContext) -> None:
        if self._cohort is None or ctx.stream != "train":
            return  # not an APFL training pass (e.g. evaluation-time fine-tuning)
        where, rows, alphas = self._cohort
        positions = torch.tensor([where[int(k)] for k in ctx.client_ids.tolist()])
        start = ctx.layout.unflatten(rows[positions.to(rows.device)])
        for name in self._trainable:
            like = ctx.global_params[name]
            ctx.cache[_V + name] = start[name].to(like.device, like.dtype).clone()
        device = ctx.global_params[self._trainable[0]].device
        ctx.cache[_ALPHA] = alphas[positions.to(alphas.device)].to(device, torch.float32).clone()

    @override
    def extra_gradient_point(self, ctx: LocalTrainingContext, params: dict[str, Tensor]) -> dict[str, Tensor] | None:
        if _ALPHA not in ctx.cache:
            return None
        ctx.cache[_W] = params  # pre-step w: the optimizer has not stepped yet when on_extra_gradient runs
        v = {n: ctx.cache[_V + n] for n in self._trainable}
        return apfl_mix(v, {n: params[n] for n in self._trainable}, ctx.cache[_ALPHA])

    @override
    def on_extra_gradient(self, ctx: LocalTrainingContext, point: dict[str, Tensor],
                          grads: dict[str, Tensor]) -> None:
        alpha, w, active = ctx.cache[_ALPHA], ctx.cache.pop(_W), ctx.active_mask()
        v = {n: ctx.cache[_V + n] for n in self._trainable}
        if self.adaptive_alpha:  # from the pre-step v, before v moves
            new_alpha = apfl_alpha_step(alpha, v, {n: w[n] for n in v}, grads, ctx.step_lr, self.alpha_l2)
            ctx.cache[_ALPHA] = _keep_active(active, new_alpha, alpha)
        for name, value in apfl_personal_step(v, grads, alpha, ctx.step_lr).items():
            ctx.cache[_V + name] = _keep_active(active, value, v[name])

    @override
    def on_local_train_end(self, ctx: LocalTrainingContext, params: dict[str, Tensor]) -> dict[str, Tensor] | None:
        if _ALPHA not in ctx.cache:
            return None
        return {**{_V + n: ctx.cache[_V + n] for n in self._trainable}, _ALPHA: ctx.cache[_ALPHA]}

    # ------------------------------------------------------------------ rounds and evaluation
    @override
    def train_round(self, train: Callable[..., CohortUpdate], round_idx: int, client_ids: Tensor,
                    participation: Tensor, federation: Federation) -> CohortUpdate:
        global_w = federation.global_model.weights()
        # v_k starts from its stored row, or (first participation) from the init rule; w from w^t.
        rows = self.start_rows(client_ids, global_w)
        where = {int(k): i for i, k in enumerate(client_ids.tolist())}
        self._cohort = (where, rows, self.alpha.gather(client_ids, global_w.device))
        try:  # the run's hooks include this callback's (a FederatedCallback is a ClientHooks)
            update = train(client_ids, participation)
        finally:
            self._cohort = None
        kept = rows[torch.tensor([where[int(k)] for k in update.client_ids.tolist()], device=rows.device)]
        for name in self._trainable:  # non-trainable float entries keep their start values
            value = update.extra[_V + name]
            kept[:, self.layout.slice_of(name)] = value.reshape(len(kept), -1).to(kept)
        self.personal.scatter(update.client_ids, kept)
        self.alpha.scatter(update.client_ids, update.extra[_ALPHA])
        return replace(update, extra={k: v for k, v in update.extra.items() if not k.startswith("apfl.")})

    @override
    def evaluated_rows(self, client_ids: Tensor, global_w: Tensor) -> Tensor:
        """``alpha_k v_k + (1 - alpha_k) w^{t+1}`` per client, built in place in the ``(K, d)`` rows of ``v_k``."""
        rows = super().evaluated_rows(client_ids, global_w)
        alpha = self.alpha.gather(client_ids, global_w.device).to(rows.dtype).unsqueeze(1)
        return rows.mul_(alpha).add_((1 - alpha) * global_w)
