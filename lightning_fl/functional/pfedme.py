"""pFedMe (T. Dinh et al., NeurIPS 2020, Alg. 1): Moreau-envelope personalization (docs/algorithms.md, pFedMe).

Client ``k`` starts a round with ``w_loc <- w^t`` and ``theta <- w^t``, then runs ``R`` local rounds,
each on one minibatch ``D``:

- ``K`` inner steps ``theta <- theta - eta_p (grad f_k(theta; D) + lambda (theta - w_loc) + mu theta)``
  (:func:`pfedme_inner_step`; ``mu`` is ``inner_l2``, 0 in the paper, 0.001 in the authors' code);
- ``w_loc <- w_loc - eta lambda (w_loc - theta)`` (:func:`pfedme_outer_step`).

Server: ``w^{t+1} = (1 - beta) w^t + beta sum_k n_k w_loc_k / sum_k n_k`` (:func:`pfedme_server_step`;
``beta = 1`` is FedAvg of the ``w_loc_k``, ``beta > 1`` extrapolates).

Shapes: the client functions take tensors or dicts of tensors (the same keys in every argument) and are
elementwise, so a leading client dimension ``C`` needs nothing; ``lr_p``, ``lam`` and ``lr`` may be
floats or ``(C,)`` tensors (one per client). The server step takes the cohort stacked on dimension 0.
"""

from __future__ import annotations

from typing import Union

from torch import Tensor

from lightning_fl.functional.weights import as_float_like, broadcast_per_client, fedavg_weights, weighted_average

__all__ = ["pfedme_inner_step", "pfedme_outer_step", "pfedme_server_step"]

Params = Union[Tensor, dict[str, Tensor]]


def _per_client(value: Tensor | float, like: Tensor) -> Tensor | float:
    return broadcast_per_client(value, like) if isinstance(value, Tensor) else value


def pfedme_inner_step(theta: Params, w_loc: Params, grad: Params, lr_p: Tensor | float, lam: Tensor | float,
                      inner_l2: float = 0.0) -> Params:
    """``theta - lr_p (grad + lam (theta - w_loc) + inner_l2 theta)`` (docs/algorithms.md, pFedMe).

    One gradient step on ``f_k(theta) + (lam / 2) ||theta - w_loc||^2 + (inner_l2 / 2) ||theta||^2``,
    the personal problem whose solution defines the Moreau envelope.

    Args:
        theta: Personal model(s): a tensor or dict of tensors (leading client dimension optional).
        w_loc: The client's local copy of the global model, shaped like ``theta``.
        grad: ``grad f_k(theta; D)`` at the current ``theta``.
        lr_p: Personal learning rate ``eta_p`` (float or ``(C,)``).
        lam: Regularisation ``lambda`` (float or ``(C,)``).
        inner_l2: ``mu``: the authors' code adds ``0.001 theta`` (option ``inner_l2``); 0 is the paper.

    Returns:
        The new ``theta``, shaped like ``theta``.

    Example:
        >>> pfedme_inner_step(torch.tensor([1.0, 2.0]), torch.tensor([0.0, 2.0]), torch.tensor([0.5, -1.0]),
        ...                   lr_p=0.1, lam=2.0)
        tensor([0.7500, 2.1000])
    """
    if isinstance(theta, dict):
        return {n: pfedme_inner_step(theta[n], w_loc[n], grad[n], lr_p, lam, inner_l2)  # type: ignore[index]
                for n in theta}
    step = grad + _per_client(lam, theta) * (theta - w_loc) + inner_l2 * theta  # type: ignore[operator]
    return theta - _per_client(lr_p, theta) * step


def pfedme_outer_step(w_loc: Params, theta: Params, lr: Tensor | float, lam: Tensor | float) -> Params:
    """``w_loc - lr lam (w_loc - theta)`` (docs/algorithms.md, pFedMe): the local model moves toward ``theta``.

    ``lam (w_loc - theta)`` is the gradient of the Moreau envelope at ``w_loc`` when ``theta`` is the
    exact personal solution.

    Args:
        w_loc: The client's local model(s).
        theta: The personal model after the ``K`` inner steps.
        lr: Learning rate ``eta`` (float or ``(C,)``).
        lam: Regularisation ``lambda`` (float or ``(C,)``).

    Returns:
        The new ``w_loc``.

    Example:
        >>> pfedme_outer_step(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), lr=0.01, lam=20.0)
        tensor([0.8000, 0.2000])
    """
    if isinstance(w_loc, dict):
        return {n: pfedme_outer_step(w_loc[n], theta[n], lr, lam) for n in w_loc}  # type: ignore[index]
    return w_loc - _per_client(lr, w_loc) * _per_client(lam, w_loc) * (w_loc - theta)  # type: ignore[operator]


def pfedme_server_step(w_t: Params, w_locs: Params, n_k: Tensor, beta: float) -> Params:
    """``(1 - beta) w^t + beta sum_k n_k w_loc_k / sum_k n_k`` (docs/algorithms.md, pFedMe).

    The average uses :func:`~lightning_fl.functional.weights.fedavg_weights` (all-zero ``n_k`` falls
    back to uniform weights).

    Args:
        w_t: The global model ``w^t`` (tensor or dict of tensors, no client dimension).
        w_locs: The cohort's local models stacked on dimension 0: ``(K, ...)`` per tensor.
        n_k: ``(K,)`` training-set sizes.
        beta: Server mixing ``beta`` (1: plain weighted average).

    Returns:
        ``w^{t+1}``, shaped like ``w_t``.

    Example:
        >>> pfedme_server_step(torch.tensor([1.0]), torch.tensor([[2.0], [4.0]]), torch.tensor([1, 3]), beta=2.0)
        tensor([6.])
    """
    like = next(iter(w_locs.values())) if isinstance(w_locs, dict) else w_locs
    weights, _ = fedavg_weights(as_float_like(n_k, like))  # in the models' dtype: float64 stays exact
    if isinstance(w_t, dict):
        return {n: _server(w_t[n], w_locs[n], weights, beta) for n in w_t}  # type: ignore[index]
    return _server(w_t, w_locs, weights, beta)  # type: ignore[arg-type]


def _server(w_t: Tensor, w_locs: Tensor, weights: Tensor, beta: float) -> Tensor:
    average = weighted_average(w_locs.flatten(1), weights).reshape(w_t.shape)
    return (1 - beta) * w_t + beta * average.to(w_t.dtype)
