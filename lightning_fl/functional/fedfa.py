"""FedFa (fairness and accuracy): information-quantity weights and server momentum (docs/algorithms.md, FedFa).

Weights over the cohort (paper eqs. 9-15, :func:`fedfa_weights`):

1. ``a_k = train_acc_k / sum_j train_acc_j``; ``f_k' = f_k / sum_j f_j`` with ``f_k`` the client's
   participation count, this round included.
2. ``Iacc_k = -log2(a_k)``, using ``-log2(a_k + c)`` only where ``a_k == 0``;
   ``If_k = -log2(1 - f_k')``, using ``-log2(1 - f_k' + c)`` only where ``1 - f_k' == 0``;
   ``c = 1e-10``.
3. ``Iacc_k /= sum Iacc``; ``If_k /= sum If``.
4. ``weight_k = alpha Iacc_k + beta If_k`` with ``alpha, beta >= 0`` and ``alpha + beta == 1``
   (within 1e-6; anything else is a configuration error). ``w_agg = sum_k weight_k y_k``.

Server momentum (journal eqs. 3-7, arXiv eqs. 5-7 and Alg. 2; :func:`server_momentum_step`). The papers'
printed sign would undo the clients' progress on the first step; we implement the descent form with
the pseudo-gradient ``g = w^t - w_agg``:

- ``heavy_ball`` (journal, default): ``m <- gamma_s m + g``; apply ``w^{t+1} = w^t - eta_s m``;
- ``ema`` (ours, see docs/algorithms.md, FedFa): ``m <- gamma_s m + (1 - gamma_s) g``; apply as ``heavy_ball``;
- ``arxiv`` (arXiv version): ``m <- gamma_s m + (1 - gamma_s) g``; apply at the aggregate,
  ``w^{t+1} = w_agg - eta_s m``.

The momentum is applied on rounds with ``(t + 1) % b == 0``; otherwise ``w^{t+1} = w_agg``. Period
reading (``period_mode``): ``every_round`` (default) updates the buffer every round with ``g`` as
above; ``per_period`` updates it only on apply rounds, with the b-round pseudo-gradient
``g = w^{t+1-b} - w_agg^{t+1}`` (the global model at the start of the period minus this round's
aggregate). Defaults ``gamma_s = 0.5``, ``eta_s = 1``, ``b = 1``; ``gamma_s = 0, b = 1`` with
``heavy_ball`` or ``ema`` is plain weighted averaging (exactly, see below; ``arxiv`` then extrapolates,
``w_agg - eta_s g``). FedFa-mo (the paper's ablation) is the same momentum step after FedAvg weights
``n_k / sum n``.

Readings documented here:

- Every normalisation (steps 1 and 3) uses the uniform fallback (docs/algorithms.md, Server arithmetic). All-zero training
  accuracies therefore give ``a_k = 1 / K`` and, after step 3, uniform accuracy information (the
  literal ``a_k = 0 -> -log2(c)`` reading gives the same uniform result); the fallback is reported.
- A one-client cohort gets weight 1 (``Iacc = -log2(1) = 0`` is not reported as degenerate).
- Note for users: the frequency term gives *more* weight to clients that have participated more
  often (``-log2(1 - f')`` grows with ``f'``), exactly as eq. 12 is written.
- ``server_lr`` multiplies the buffer when it is applied (``w^t - eta_s m``), not the pseudo-gradient
  inside the buffer as the paper prints it; with the default ``eta_s = 1`` the two agree.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lightning_fl.functional.weights import (
    ConfigError,
    as_float_like,
    check_choice,
    normalize_weights,
)

__all__ = ["FEDFA_C", "MOMENTUM_FORMS", "PERIOD_MODES", "fedfa_weights", "server_momentum_step"]

FEDFA_C = 1e-10
MOMENTUM_FORMS = ("heavy_ball", "ema", "arxiv")
PERIOD_MODES = ("every_round", "per_period")


def _check_alpha_beta(alpha: float, beta: float) -> None:
    ok = (
        math.isfinite(alpha)
        and math.isfinite(beta)
        and alpha >= 0
        and beta >= 0
        and abs(alpha + beta - 1.0) <= 1e-6
    )
    if not ok:
        raise ConfigError(f"alpha and beta must be >= 0 and sum to 1; got alpha={alpha!r}, beta={beta!r}")


def _information(x: Tensor, c: float) -> Tensor:
    """``-log2(x)``, using ``-log2(x + c)`` exactly where ``x == 0`` (eqs. 11 and 12)."""
    return -torch.log2(torch.where(x == 0, x + c, x))


def fedfa_weights(
    train_acc: Tensor,
    participation: Tensor,
    alpha: float,
    beta: float,
    c: float = FEDFA_C,
) -> tuple[Tensor, bool]:
    """FedFa aggregation weights (docs/algorithms.md, FedFa, steps 1-4).

    Args:
        train_acc: ``(K,)`` training accuracy of each cohort member in ``[0, 1]``.
        participation: ``(K,)`` participation counts ``f_k`` (this round included).
        alpha: Weight of the accuracy information (>= 0).
        beta: Weight of the frequency information (>= 0), ``alpha + beta == 1``.
        c: The small constant of eqs. 11-12 (default ``1e-10``).

    Returns:
        ``(weights, degenerate)``: ``(K,)`` weights summing to ``alpha + beta``, in ``train_acc``'s
        dtype (float32 if it is not floating point), and whether any normalisation fell back to
        uniform.

    Raises:
        ConfigError: If ``alpha``/``beta`` are negative or do not sum to 1 (within 1e-6).

    Example:
        >>> w, degenerate = fedfa_weights(torch.tensor([0.5, 0.5]), torch.tensor([1, 3]), 0.0, 1.0)
        >>> w  # If = [-log2(3/4), -log2(1/4)] = [0.415, 2] normalised
        tensor([0.1719, 0.8281])
    """
    _check_alpha_beta(alpha, beta)
    acc = train_acc if train_acc.is_floating_point() else train_acc.to(torch.float32)
    a, deg_a = normalize_weights(acc)
    f_share, deg_f = normalize_weights(as_float_like(participation, acc))
    i_acc, deg_iacc = normalize_weights(_information(a, c))
    i_f, deg_if = normalize_weights(_information(1.0 - f_share, c))
    weights = alpha * i_acc + beta * i_f
    return weights, deg_a or deg_f or deg_iacc or deg_if


def server_momentum_step(
    global_w: Tensor,
    agg_w: Tensor,
    momentum: Tensor | None,
    round_idx: int,
    gamma: float = 0.5,
    server_lr: float = 1.0,
    period: int = 1,
    form: str = "heavy_ball",
    period_mode: str = "every_round",
    period_start: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """FedFa's server momentum in descent form (docs/algorithms.md, FedFa, step 5).

    Args:
        global_w: ``w^t``, ``(d,)``.
        agg_w: ``w_agg``, the weighted aggregate of the cohort, ``(d,)``.
        momentum: Buffer ``m`` from the previous round, or ``None`` for zeros.
        round_idx: ``t``, the 0-based round index.
        gamma: ``gamma_s`` (default 0.5).
        server_lr: ``eta_s`` (default 1).
        period: ``b`` >= 1 (default 1): the buffer is applied when ``(t + 1) % b == 0``.
        form: ``"heavy_ball"`` (default), ``"ema"`` or ``"arxiv"``.
        period_mode: ``"every_round"`` (default: the buffer is updated every round with
            ``g = w^t - w_agg``) or ``"per_period"`` (updated on apply rounds only, with
            ``g = w^{t+1-b} - w_agg``).
        period_start: ``w^{t+1-b}``, the global model at the start of the current period; required
            with ``per_period``, ignored otherwise.

    Returns:
        ``(new_w, new_momentum)``; with ``per_period`` the buffer is returned unchanged (zeros for
        ``None``) on rounds that do not apply it.

    Raises:
        ConfigError: If ``form`` or ``period_mode`` is not one of the allowed values.
        ValueError: If ``period < 1``, ``round_idx < 0``, or ``per_period`` without ``period_start``.

    Example:
        >>> # g = 1 - 0.5; m = 0.5 * 1 + g = 1; w = 1 - 1 * m
        >>> server_momentum_step(torch.tensor([1.0]), torch.tensor([0.5]), torch.tensor([1.0]), 0)
        (tensor([0.]), tensor([1.]))
    """
    check_choice("form", form, MOMENTUM_FORMS)
    check_choice("period_mode", period_mode, PERIOD_MODES)
    if isinstance(period, bool) or not isinstance(period, int) or period < 1:
        raise ValueError(f"period must be an integer >= 1; got {period!r}")
    if round_idx < 0:
        raise ValueError(f"round_idx must be >= 0; got {round_idx!r}")
    apply = (round_idx + 1) % period == 0
    prev = torch.zeros_like(agg_w) if momentum is None else momentum
    step = global_w - agg_w  # this round's pseudo-gradient; -step is the direction the clients moved
    if period_mode == "per_period":
        if period_start is None:
            raise ValueError("period_mode per_period needs period_start (the global model w^{t+1-b})")
        if not apply:
            return agg_w.clone(), prev
        g = period_start - agg_w  # the whole period's progress
    else:
        g = step
    new_momentum = gamma * prev + (g if form == "heavy_ball" else (1.0 - gamma) * g)
    if not apply:
        return agg_w.clone(), new_momentum
    if form == "arxiv":
        return agg_w - server_lr * new_momentum, new_momentum
    # w^t - eta_s m written as w_agg + (step - eta_s m): algebraically identical, and exactly w_agg when
    # gamma_s = 0 and eta_s = 1 in every_round mode (step - step == 0), so the reduction holds bit for bit.
    return agg_w + (step - server_lr * new_momentum), new_momentum
