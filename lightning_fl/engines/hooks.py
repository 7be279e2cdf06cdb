"""Client-side algorithm hooks, called by every client engine on cohort-stacked tensors."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from torch import Tensor

from lightning_fl.engines.cohort import LocalTrainingContext

_HOOK_NAMES = ("on_local_train_start", "local_loss_term", "extra_gradient_point", "on_extra_gradient",
               "correct_local_gradients", "after_local_step", "on_local_train_end")


class ClientHooks:
    """Mixin with the client-side hooks an algorithm may override (all default to doing nothing).

    Every tensor argument carries a leading dimension ``C`` (the clients trained together), so an
    algorithm written once runs in the sequential engine (``C == 1``) and in the vectorized one.
    ``params`` and ``grads`` map trainable parameter names to ``(C, *shape)`` tensors that alias the
    engine's live tensors: in-place changes take effect.

    Attributes:
        requires_loss_before: Set to ``True`` when the algorithm needs ``loss_before_k``, the loss of
            ``w^t`` on each client's train split before training (q-FFL, docs/algorithms.md, Notation).
        requires_trained_accuracy: Set to ``True`` when the algorithm needs the accuracy of each trained
            ``y_k`` on the client's full train split, measured after training (FedFa's ``train_acc_k``,
            docs/algorithms.md, Notation): ``CohortUpdate.trained_acc``.
    """

    requires_loss_before: bool = False
    requires_trained_accuracy: bool = False
    #: ``correct_local_gradients`` reads nothing but each row's own parameters and gradients (and ``w^t``),
    #: so an engine may pass only the rows still training (no padding for finished clients).
    row_wise_correction: bool = False

    def on_local_train_start(self, ctx: LocalTrainingContext) -> None:
        """Called once before the first local step of the clients in ``ctx`` (fill ``ctx.cache``)."""

    def local_loss_term(self, ctx: LocalTrainingContext, params: dict[str, Tensor]) -> Tensor | None:
        """An extra loss per client, shape ``(C,)``, added to the data loss (e.g. FedProx)."""
        return None

    def extra_gradient_point(self, ctx: LocalTrainingContext, params: dict[str, Tensor]) -> dict[str, Tensor] | None:
        """Other parameters ``(C, *shape)`` at which to differentiate this step's data loss, or ``None``.

        Called every local step before the optimizer step, so ``params`` are the pre-step values. The
        point maps trainable parameter names to ``(C, *shape)`` tensors; names left out take the live
        values. :meth:`on_extra_gradient` then receives the gradients (e.g. APFL's ``grad f_k(vbar; b)``).
        """
        return None

    def on_extra_gradient(self, ctx: LocalTrainingContext, point: dict[str, Tensor],
                          grads: dict[str, Tensor]) -> None:
        """Receive ``grads``: per client, the gradient of its mean data loss on this step's minibatch at ``point``.

        ``grads`` has the point's names and ``(C, *shape)`` shapes; no ``local_loss_term`` enters it, and
        rows of clients that have finished training are zeros.
        """

    def correct_local_gradients(self, ctx: LocalTrainingContext, params: dict[str, Tensor],
                                grads: dict[str, Tensor]) -> None:
        """Modify ``grads`` in place before the optimizer step (e.g. SCAFFOLD's ``- c_k + c``)."""

    def after_local_step(self, ctx: LocalTrainingContext, params: dict[str, Tensor],
                         step_delta: dict[str, Tensor]) -> None:
        """Modify ``params`` in place after the optimizer step; ``step_delta`` is ``w_after - w_before``."""

    def on_local_train_end(self, ctx: LocalTrainingContext, params: dict[str, Tensor]) -> dict[str, Tensor] | None:
        """Per-client statistics ``(C, ...)`` to add to ``CohortUpdate.extra`` after training."""
        return None


class ClientHookSet(ClientHooks):
    """All the run's client hooks as one: each hook calls, in order, the objects that override it.

    It has the same hook names as :class:`ClientHooks`, so an engine calls ``hooks.after_local_step``
    exactly as an algorithm implements it, and :meth:`has` lets engines skip the work of unused hooks.

    Args:
        candidates: Any objects (usually the trainer's callbacks); those that are ``ClientHooks`` and
            override a hook are kept for that hook, in order.
    """

    def __init__(self, candidates: Iterable[object]) -> None:
        hooks = [c for c in candidates if isinstance(c, ClientHooks)]
        self.by_name: dict[str, list[ClientHooks]] = {
            name: [h for h in hooks if getattr(type(h), name) is not getattr(ClientHooks, name)] for name in _HOOK_NAMES
        }
        self.requires_loss_before = any(h.requires_loss_before for h in hooks)
        self.row_wise_correction = all(h.row_wise_correction for h in self.by_name["correct_local_gradients"])
        self.requires_trained_accuracy = any(h.requires_trained_accuracy for h in hooks)

    def has(self, name: str) -> bool:
        """Whether any object overrides hook ``name``."""
        return bool(self.by_name[name])

    def on_local_train_start(self, ctx: LocalTrainingContext) -> None:
        for h in self.by_name["on_local_train_start"]:
            h.on_local_train_start(ctx)

    def local_loss_term(self, ctx: LocalTrainingContext, params: dict[str, Tensor]) -> Tensor | None:
        total = None
        for h in self.by_name["local_loss_term"]:
            term = h.local_loss_term(ctx, params)
            if term is not None:
                total = term if total is None else total + term
        return total

    def extra_gradients(self, ctx: LocalTrainingContext, params: dict[str, Tensor],
                        gradients_at: Callable[[dict[str, Tensor]], dict[str, Tensor]]) -> None:
        """Each hook's ``extra_gradient_point``, differentiated by ``gradients_at``, to its ``on_extra_gradient``."""
        for h in self.by_name["extra_gradient_point"]:
            point = h.extra_gradient_point(ctx, params)
            if point is not None:
                h.on_extra_gradient(ctx, point, gradients_at(point))

    def correct_local_gradients(self, ctx: LocalTrainingContext, params: dict[str, Tensor],
                                grads: dict[str, Tensor]) -> None:
        for h in self.by_name["correct_local_gradients"]:
            h.correct_local_gradients(ctx, params, grads)

    def after_local_step(self, ctx: LocalTrainingContext, params: dict[str, Tensor],
                         step_delta: dict[str, Tensor]) -> None:
        for h in self.by_name["after_local_step"]:
            h.after_local_step(ctx, params, step_delta)

    def on_local_train_end(self, ctx: LocalTrainingContext, params: dict[str, Tensor]) -> dict[str, Tensor]:
        extra: dict[str, Tensor] = {}
        for h in self.by_name["on_local_train_end"]:
            extra.update(h.on_local_train_end(ctx, params) or {})
        return extra
