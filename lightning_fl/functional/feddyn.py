"""FedDyn (Acar et al., ICLR 2021, Algorithm 1): dynamic regularisation of every client's objective.

State: one vector ``g_k`` per client (its last local gradient estimate ``grad L_k(theta_k)``, zeros at
start) and a server vector ``h`` (zeros at start). With ``alpha > 0``:

- Client ``k``, local objective (Algorithm 1, line 7):
  ``L_k(theta) - <g_k, theta> + (alpha / 2) ||theta - theta^t||^2`` (:func:`feddyn_local_term` is
  the part after ``L_k``).
- Client, after training to ``theta_k`` (line 8): ``g_k <- g_k - alpha (theta_k - theta^t)``
  (:func:`feddyn_client_state`).
- Server (lines 10-11): ``h <- h - (alpha / N) sum_{k in P_t} (theta_k - theta^t)`` with ``N`` the
  number of clients, and ``theta^{t+1} = mean_{k in P_t} theta_k - h / alpha``
  (:func:`feddyn_server_step`).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["feddyn_client_state", "feddyn_local_term", "feddyn_server_step"]


def feddyn_local_term(params: dict[str, Tensor], global_params: dict[str, Tensor], grad_k: dict[str, Tensor],
                      alpha: float) -> Tensor:
    """``-<g_k, theta> + (alpha/2) ||theta - theta^t||^2`` per client, shape ``(C,)``.

    Args:
        params: ``(C, *shape)`` client parameters by name (differentiable).
        global_params: ``theta^t`` by name, no leading dimension.
        grad_k: ``(C, *shape)`` client states ``g_k`` by name.
        alpha: ``alpha > 0``.

    Example:
        >>> theta = {"w": torch.tensor([[1.0, 2.0]])}  # -<g, theta> = 1, (alpha/2) ||theta||^2 = 1.25
        >>> feddyn_local_term(theta, {"w": torch.tensor([0.0, 0.0])}, {"w": torch.tensor([[1.0, -1.0]])}, 0.5)
        tensor([2.2500])
    """
    total = None
    for name, value in params.items():
        linear = (grad_k[name].to(value.dtype) * value).flatten(1).sum(1)
        square = (value - global_params[name].unsqueeze(0)).pow(2).flatten(1).sum(1)
        term = 0.5 * alpha * square - linear
        total = term if total is None else total + term
    return total if total is not None else torch.zeros(())


def feddyn_client_state(grad_k: Tensor, client_w: Tensor, global_w: Tensor, alpha: float) -> Tensor:
    """``g_k - alpha (theta_k - theta^t)``; ``(C, d)`` states and weights, ``(d,)`` global.

    Example:
        >>> feddyn_client_state(torch.zeros(1, 2), torch.tensor([[1.0, 2.0]]), torch.zeros(2), 0.1)
        tensor([[-0.1000, -0.2000]])
    """
    return grad_k - alpha * (client_w - global_w.unsqueeze(0))


def feddyn_server_step(global_w: Tensor, client_w: Tensor, h: Tensor, alpha: float,
                       num_clients: int) -> tuple[Tensor, Tensor]:
    """``(theta^{t+1}, h^{t+1})`` from the cohort's ``(K, d)`` weights ``theta_k``.

    Example:
        >>> new_w, h = feddyn_server_step(torch.zeros(2), torch.tensor([[1.0, 2.0], [3.0, 0.0]]),
        ...                               torch.zeros(2), alpha=0.1, num_clients=4)
        >>> h, new_w
        (tensor([-0.1000, -0.0500]), tensor([3.0000, 1.5000]))
    """
    h = h - (alpha / num_clients) * (client_w - global_w.unsqueeze(0)).sum(0)
    return client_w.mean(0) - h / alpha, h
