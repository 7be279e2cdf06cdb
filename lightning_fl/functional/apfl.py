"""APFL (Deng et al. 2020, arXiv 2003.13461, Alg. 1): a personal model mixed with the global one (docs/algorithms.md, APFL).

Client ``k`` keeps a personal model ``v_k`` and a mixing weight ``alpha_k`` (0.5 at start). Every local
step on a minibatch ``b`` uses the pre-step values of ``w``, ``v_k`` and ``alpha_k``:

- ``w <- w - eta grad f_k(w; b)`` (plain SGD on the model that is sent and averaged);
- ``vbar = alpha_k v_k + (1 - alpha_k) w`` (:func:`apfl_mix`);
- ``v_k <- v_k - eta alpha_k grad f_k(vbar; b)`` (:func:`apfl_personal_step`);
- ``alpha_k <- clip(alpha_k - eta <v_k - w, grad f_k(vbar; b)>, 0, 1)`` (:func:`apfl_alpha_step`),
  the chain rule of ``f_k(alpha v + (1 - alpha) w)`` in ``alpha``.

:func:`apfl_local_step` does the three updates at once. The evaluated model is
``alpha_k v_k + (1 - alpha_k) w^{t+1}``.

Shapes: every function takes tensors or dicts of tensors (the same keys in every argument). With a
per-client ``alpha`` of shape ``(C,)`` the tensors carry a leading client dimension ``C`` and every
client is independent (the inner product sums over all entries of one client, across all keys); a
scalar ``alpha`` means one client and the inner product sums over everything.
"""

from __future__ import annotations

from typing import Union

import torch
from torch import Tensor

from lightning_fl.functional.weights import broadcast_per_client

__all__ = ["apfl_alpha_step", "apfl_local_step", "apfl_mix", "apfl_personal_step"]

Params = Union[Tensor, dict[str, Tensor]]


def _per_client(value: Tensor | float, like: Tensor) -> Tensor | float:
    return broadcast_per_client(value, like) if isinstance(value, Tensor) else float(value)


def apfl_mix(v: Params, w: Params, alpha: Tensor | float) -> Params:
    """``alpha v + (1 - alpha) w`` (docs/algorithms.md, APFL): the mixed model ``vbar``.

    Args:
        v: Personal model(s): a tensor or dict of tensors, ``(C, ...)`` when ``alpha`` is ``(C,)``.
        w: Local copies of the global model, shaped like ``v``.
        alpha: Mixing weight: a float, a 0-d tensor, or one per client ``(C,)``.

    Returns:
        The mixture, shaped like ``v`` (a dict when ``v`` is one).

    Example:
        >>> apfl_mix(torch.tensor([[1.0, 3.0], [2.0, 2.0]]), torch.zeros(2, 2), torch.tensor([0.5, 0.25]))
        tensor([[0.5000, 1.5000],
                [0.5000, 0.5000]])
    """
    if isinstance(v, dict):
        return {name: apfl_mix(v[name], w[name], alpha) for name in v}
    a = _per_client(alpha, v)
    return a * v + (1 - a) * w


def apfl_personal_step(v: Params, grad_vbar: Params, alpha: Tensor | float, lr: float) -> Params:
    """``v - lr alpha grad f(vbar)`` (docs/algorithms.md, APFL): the personal model's SGD step.

    ``d f(vbar) / d v = alpha grad f(vbar)`` because ``vbar = alpha v + (1 - alpha) w``.

    Args:
        v: Personal model(s), as in :func:`apfl_mix`.
        grad_vbar: ``grad f_k(vbar; b)``, shaped like ``v``.
        alpha: The pre-step mixing weight(s).
        lr: Learning rate ``eta``.

    Returns:
        The new ``v``.

    Example:
        >>> apfl_personal_step(torch.tensor([1.0, 1.0]), torch.tensor([2.0, -4.0]), 0.5, 0.1)
        tensor([0.9000, 1.2000])
    """
    if isinstance(v, dict):
        return {name: apfl_personal_step(v[name], grad_vbar[name], alpha, lr) for name in v}
    return v - lr * _per_client(alpha, v) * grad_vbar


def _alpha_tensor(alpha: Tensor | float, v: Params) -> Tensor:
    """``alpha`` as a tensor on ``v``'s device; a float or integer ``alpha`` takes ``v``'s dtype."""
    like = next(iter(v.values())) if isinstance(v, dict) else v
    if isinstance(alpha, Tensor):
        return alpha.to(like.device) if alpha.is_floating_point() else alpha.to(like.device, like.dtype)
    return torch.tensor(float(alpha), device=like.device, dtype=like.dtype)


def _inner(a: Params, b: Params, per_client: bool) -> Tensor:
    """``<a, b>`` over every entry (and key): ``(C,)`` per client, or 0-d."""
    pairs = [(a[n], b[n]) for n in a] if isinstance(a, dict) else [(a, b)]  # type: ignore[index]
    if per_client:
        return sum(((x * y).flatten(1).sum(1) for x, y in pairs), torch.zeros(()))
    return sum(((x * y).sum() for x, y in pairs), torch.zeros(()))


def apfl_alpha_step(alpha: Tensor | float, v: Params, w: Params, grad_vbar: Params, lr: float,
                    alpha_l2: float = 0.0) -> Tensor:
    """``clip(alpha - lr (<v - w, grad f(vbar)> + alpha_l2 alpha), 0, 1)`` (docs/algorithms.md, APFL).

    Args:
        alpha: The pre-step mixing weight: a float or 0-d tensor (one client; the inner product runs
            over all entries), or ``(C,)`` (one per client; the inner product runs over each client's
            entries, tensors ``(C, ...)``).
        v: Pre-step personal model(s).
        w: Pre-step local copies of the global model.
        grad_vbar: ``grad f_k(vbar; b)`` at the pre-step mixture.
        lr: Learning rate ``eta`` of ``alpha``.
        alpha_l2: Adds ``alpha_l2 alpha`` to alpha's gradient (FedTorch's variant; 0 is the paper's rule).

    Returns:
        The new ``alpha``, in ``[0, 1]``, with ``alpha``'s shape and ``v``'s floating dtype.

    Example:
        >>> apfl_alpha_step(0.5, torch.tensor([2.0, 0.0]), torch.tensor([1.0, 1.0]), torch.tensor([1.0, 3.0]), 0.1)
        tensor(0.7000)
    """
    a = _alpha_tensor(alpha, v)
    per_client = a.dim() == 1
    diff = {n: v[n] - w[n] for n in v} if isinstance(v, dict) else v - w  # type: ignore[index, operator]
    grad = _inner(diff, grad_vbar, per_client).to(device=a.device, dtype=a.dtype) + alpha_l2 * a
    return (a - lr * grad).clamp(0.0, 1.0)


def apfl_local_step(w: Params, v: Params, alpha: Tensor | float, grad_w: Params, grad_vbar: Params, lr: float,
                    adaptive_alpha: bool = True, alpha_l2: float = 0.0) -> tuple[Params, Params, Tensor]:
    """One APFL local step from the pre-step ``(w, v, alpha)`` (docs/algorithms.md, APFL).

    Args:
        w: Local copy of the global model; ``grad_w = grad f_k(w; b)``.
        v: Personal model; ``grad_vbar = grad f_k(apfl_mix(v, w, alpha); b)`` on the same minibatch.
        alpha: Mixing weight(s), as in :func:`apfl_alpha_step`.
        grad_w: Gradient at ``w``.
        grad_vbar: Gradient at the mixture ``vbar``.
        lr: Learning rate ``eta`` (one for ``w``, ``v`` and ``alpha``).
        adaptive_alpha: ``False`` keeps ``alpha`` fixed (option ``adaptive_alpha: false``).
        alpha_l2: As in :func:`apfl_alpha_step`.

    Returns:
        ``(w', v', alpha')``.

    Example:
        >>> w2, v2, a2 = apfl_local_step(torch.tensor([1.0]), torch.tensor([3.0]), 0.5, torch.tensor([1.0]),
        ...                              torch.tensor([2.0]), 0.1)
        >>> w2, v2, a2  # w - 0.1 * 1, v - 0.1 * 0.5 * 2, clip(0.5 - 0.1 * (3 - 1) * 2)
        (tensor([0.9000]), tensor([2.9000]), tensor(0.1000))
    """
    if isinstance(w, dict):
        new_w: Params = {name: w[name] - lr * grad_w[name] for name in w}  # type: ignore[index]
    else:
        new_w = w - lr * grad_w  # type: ignore[operator]
    new_v = apfl_personal_step(v, grad_vbar, alpha, lr)
    if adaptive_alpha:
        new_alpha = apfl_alpha_step(alpha, v, w, grad_vbar, lr, alpha_l2)
    else:
        new_alpha = _alpha_tensor(alpha, v).clone()
    return new_w, new_v, new_alpha
