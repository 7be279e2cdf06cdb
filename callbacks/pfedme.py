"""pFedMe: personalization through Moreau envelopes (docs/algorithms.md, Personalization, pFedMe)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
from torch import Tensor
from typing_extensions import override

from lightning_fl.aggregation.pipeline import Combination
from lightning_fl.callbacks.personalized import PersonalizedAggregation
from lightning_fl.engines.base import fixed_minibatches
from lightning_fl.engines.cohort import CohortUpdate, LocalTrainingContext
from lightning_fl.engines.evaluation import ClientEvaluation
from lightning_fl.engines.hooks import ClientHooks, ClientHookSet
from lightning_fl.faults.validation import ConfigError, check_choice, check_non_negative, check_positive
from lightning_fl.functional.pfedme import pfedme_outer_step, pfedme_server_step
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.federation import Federation

#: What a client's personal model is: the last ``theta`` (the paper) or ``w_loc`` (what the authors' code scores).
EVALUATED = ("theta", "w_loc")
_W_LOC = "pfedme.w_loc."  # prefix of the per-parameter extras that carry w_loc back from the engine


class _Moreau(ClientHooks):
    """The client side of pFedMe on the engine's parameters ``theta`` (``C`` clients at once).

    The engine steps ``theta`` with plain SGD at ``eta_p`` on ``f_k(theta; D) + lam/2 ||theta - w_loc||^2
    (+ inner_l2/2 ||theta||^2)``, ``K`` steps per minibatch (``batch_repeats``); after each minibatch's
    ``K``-th step ``w_loc <- w_loc - eta lam (w_loc - theta)``. ``w_loc`` lives in ``ctx.cache``.
    """

    def __init__(self, lam: float, lr: float, inner_steps: int, inner_l2: float) -> None:
        self.lam, self.lr, self.inner_steps, self.inner_l2 = lam, lr, inner_steps, inner_l2

    @override
    def on_local_train_start(self, ctx: LocalTrainingContext) -> None:
        start = None if ctx.start_rows is None else ctx.layout.unflatten(ctx.start_rows)
        ctx.cache["w_loc"] = {  # w_loc <- the model the client starts from (w^t)
            n: (start[n].to(g.dtype) if start is not None else g.unsqueeze(0).expand(ctx.num_clients, *g.shape)).clone()
            for n, g in ctx.global_params.items()}

    @override
    def local_loss_term(self, ctx: LocalTrainingContext, params: dict[str, Tensor]) -> Tensor:
        w_loc = ctx.cache["w_loc"]
        total = None
        for name, theta in params.items():
            term = 0.5 * self.lam * (theta - w_loc[name]).pow(2).flatten(1).sum(1)
            if self.inner_l2:
                term = term + 0.5 * self.inner_l2 * theta.pow(2).flatten(1).sum(1)
            total = term if total is None else total + term
        return total

    @override
    def after_local_step(self, ctx: LocalTrainingContext, params: dict[str, Tensor],
                         step_delta: dict[str, Tensor]) -> None:
        if (ctx.step + 1) % self.inner_steps:
            return
        w_loc = ctx.cache["w_loc"]
        active = ctx.active_mask()  # a client that has finished keeps its w_loc
        moved = pfedme_outer_step({n: w_loc[n] for n in params}, params, self.lr, self.lam)
        for name, value in moved.items():
            w_loc[name] = torch.where(active.view(-1, *[1] * (value.dim() - 1)), value, w_loc[name])

    @override
    def on_local_train_end(self, ctx: LocalTrainingContext, params: dict[str, Tensor]) -> dict[str, Tensor]:
        return {_W_LOC + n: v for n, v in ctx.cache["w_loc"].items()}


class PFedMe(PersonalizedAggregation):
    """pFedMe (T. Dinh et al., NeurIPS 2020, Alg. 1): each client solves a Moreau-envelope problem around ``w_loc``.

    Client ``k`` starts a round with ``theta = w_loc = w^t`` and runs ``R`` local rounds, each on one
    minibatch ``D``: ``K`` inner steps ``theta <- theta - eta_p (grad f_k(theta; D) + lam (theta - w_loc))``,
    then ``w_loc <- w_loc - eta lam (w_loc - theta)``. The server takes ``w^{t+1} = (1 - beta) w^t + beta
    sum n_k w_loc_k / sum n_k`` over the sampled clients (``n_k``: the client's whole train split, as
    the authors' code). The engine trains ``theta`` with ``model.optimizer``, which must therefore be
    plain SGD: its ``lr`` is ``eta_p``; ``lr`` here is the outer ``eta``. ``model.local_epochs`` is not used:
    every client draws ``R`` minibatches of ``model.batch_size`` (cycling through its epochs), each
    stepped ``K`` times (``batch_repeats``). Under ``model.system`` the clients still take all their steps.

    Args:
        lam: ``lambda > 0`` (default 15, the authors' README; their Synthetic table: 20 MLR, 30 DNN).
        lr: Outer learning rate ``eta`` of ``w_loc`` (default 0.005; the table: 0.01).
        inner_steps: ``K >= 1`` inner steps per minibatch.
        local_rounds: ``R >= 1`` minibatches per round.
        beta: Server mixing ``beta > 0`` (1: the weighted average; the table: 2).
        inner_l2: ``mu >= 0`` adds ``mu theta`` to the inner gradient (the authors' code: 0.001).
        all_clients_train: Every client trains every round and only the sampled ones are aggregated, as
            the authors' code does; ``False``: only the sampled clients train (the paper's Alg. 1).
        evaluate: The personal model scored under ``model.eval.model: personal``: ``theta`` (the
            paper's ``theta_k``) or ``w_loc`` (what the authors' ``evaluate_personalized_model`` scores).
        weighting: Server weights ``samples`` (``n_k``) or ``uniform``.
        log_global: At every test evaluation, also log the global model's pooled and client-mean
            accuracy over every client as ``test/global_acc_pooled`` and ``test/global_acc_mean`` (the
            paper's "GM" beside its "PM").

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.PFedMe
              init_args: {lam: 20.0, lr: 0.01, beta: 2.0}
        model:
          optimizer: {class_path: torch.optim.SGD, init_args: {lr: 0.01}}   # eta_p
          eval: {model: personal, clients: all, weighting: pooled}
    """

    personal_part = "full"
    personal_in_global = False
    logged_scalars = ("test/global_acc_pooled", "test/global_acc_mean")

    def __init__(self, lam: float = 15.0, lr: float = 0.005, inner_steps: int = 5, local_rounds: int = 20,
                 beta: float = 1.0, inner_l2: float = 0.0, all_clients_train: bool = False, evaluate: str = "theta",
                 weighting: str = "samples", log_global: bool = True) -> None:
        super().__init__(weighting=weighting)
        check_positive("lam", lam)
        check_positive("lr", lr)
        check_positive("inner_steps", inner_steps, integer=True)
        check_positive("local_rounds", local_rounds, integer=True)
        check_positive("beta", beta)
        check_non_negative("inner_l2", inner_l2)
        check_choice("evaluate", evaluate, EVALUATED)
        self.lam, self.lr, self.beta, self.inner_l2 = float(lam), float(lr), float(beta), float(inner_l2)
        self.inner_steps, self.local_rounds = int(inner_steps), int(local_rounds)
        self.all_clients_train, self.evaluate, self.log_global = bool(all_clients_train), evaluate, bool(log_global)
        self._hooks = ClientHookSet([_Moreau(self.lam, self.lr, self.inner_steps, self.inner_l2)])
        if not self.log_global:
            self.logged_scalars = ()

    @override
    def on_federation_setup(self, federation: Federation) -> None:
        super().on_federation_setup(federation)
        self.require_plain_sgd(federation, "steps theta with plain SGD at lr eta_p (for an L2 term: inner_l2)")
        if federation.hierarchy is not None:
            raise ConfigError("model.hierarchy: PFedMe trains flat rounds only; remove model.hierarchy")

    @override
    def train_round(self, train: Callable[..., CohortUpdate], round_idx: int, client_ids: Tensor,
                    participation: Tensor, federation: Federation) -> CohortUpdate:
        ids, counts = client_ids, participation
        if self.all_clients_train:  # the others' counts are placeholders: only the sampled clients participate
            ids = torch.arange(federation.num_clients)
            counts = torch.zeros(len(ids), dtype=participation.dtype)
            counts[client_ids] = participation
        sizes = federation.train_sizes[ids]
        epochs, steps = fixed_minibatches(sizes, federation.batch_size, self.local_rounds, self.inner_steps)
        update = train(ids, counts, hooks=self._hooks, local_epochs=epochs, num_steps=steps,
                       batch_repeats=self.inner_steps)
        sent = update.weights.clone()  # float buffers stay as trained; every parameter is replaced by w_loc
        for name in federation.trainable:
            sent[:, federation.layout.slice_of(name)] = update.extra[_W_LOC + name].reshape(len(sent), -1).to(sent)
        self.personal.scatter(update.client_ids, update.weights if self.evaluate == "theta" else sent)
        # n_k is the client's whole train split (the authors' train_samples), not the samples of R minibatches.
        update = replace(update, weights=sent, num_samples=federation.train_sizes[update.client_ids],
                         extra={k: v for k, v in update.extra.items() if not k.startswith(_W_LOC)})
        return update.select(torch.isin(update.client_ids, client_ids)) if self.all_clients_train else update

    @override
    def combination(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                    log: RoundLogger) -> Combination:
        weights = super().combination(round_idx, global_w, update, federation, log).p
        sizes = update.num_samples if self.weighting == "samples" else torch.ones_like(update.num_samples)
        return Combination(weights, scale=self.beta,
                           exact=lambda: pfedme_server_step(global_w, update.weights, sizes.to(global_w.device),
                                                            self.beta))

    @override
    def on_clients_evaluated(self, round_idx: int, evaluation: ClientEvaluation, federation: Federation,
                             log: RoundLogger) -> None:
        if not self.log_global or evaluation.stage != "test" or federation.global_model is None:
            return
        correct, total, _ = federation.global_model.evaluate("test")
        has = total > 0
        log.log_scalars({"test/global_acc_pooled": float(correct.sum() / total.sum().clamp_min(1)),
                         "test/global_acc_mean": float((correct[has] / total[has]).mean()) if bool(has.any()) else 0.0})
