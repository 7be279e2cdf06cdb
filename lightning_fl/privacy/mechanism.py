"""The Gaussian mechanism of client-level DP as pure functions (docs/algorithms.md, Client-level differential privacy).

- :func:`dp_weights`: ``a_k = min(n_k / n_cap, 1)`` (or 1), each client's weight from its own size alone.
- :func:`fixed_denominator_sum`: the estimators ``f_f`` (``sum_S a_k ū_k / (qW)``) and ``f_c``
  (``sum_S a_k ū_k / max(qW_min, sum_S a_k)``) of McMahan et al. 2018.
- :func:`keyed_gaussian`: noise in fp32 from a counter-based generator keyed ``(seed, t, tag, ...)``,
  drawn on the CPU and moved to the model's device, so every device, process count and resume draws the
  same vector.
- :func:`noised_unclipped_fraction` and :func:`next_clip_norm`: adaptive clipping (Andrew et al. 2021).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lightning_fl.functional.weights import weighted_average
from lightning_fl.state.seeding import generator_for

#: ``dp.estimator`` values: the fixed denominator ``qW`` (default) or the clipped one ``max(qW_min, sum a)``.
ESTIMATORS = ("f_f", "f_c")


def dp_weights(num_samples: Tensor, n_cap: float | None = None) -> Tensor:
    """``a_k = min(n_k / n_cap, 1)``, or 1 for every client when ``n_cap`` is ``None`` (fp64).

    Example:
        >>> dp_weights(torch.tensor([5, 10, 40]), 20).tolist()
        [0.25, 0.5, 1.0]
    """
    if n_cap is None:
        return torch.ones(num_samples.shape, dtype=torch.float64)
    return torch.clamp(num_samples.double() / float(n_cap), max=1.0)


def fixed_denominator_sum(U: Tensor, a: Tensor, denominator: float, estimator: str = "f_f") -> Tensor:
    """``sum_k a_k u_k / D``: ``D = denominator`` (``f_f``: ``qW``) or ``max(denominator, sum_k a_k)`` (``f_c``).

    Args:
        U: ``(K_t, P)`` clipped rows (``K_t`` may be 0: the zero vector).
        a: ``(K_t,)`` weights in ``[0, 1]``.
        denominator: ``qW`` (``f_f``) or ``qW_min`` (``f_c``).
        estimator: ``f_f`` or ``f_c``.

    Example:
        >>> fixed_denominator_sum(torch.tensor([[2.0, 0.0], [0.0, 4.0]]), torch.tensor([1.0, 0.5]), 4.0)
        tensor([0.5000, 0.5000])
    """
    if U.shape[0] == 0:
        return torch.zeros(U.shape[1], dtype=U.dtype, device=U.device)
    if estimator == "f_c":
        denominator = max(denominator, float(a.double().sum()))
    # The coefficients a_k / D in the rows' dtype, then the cohort's weighted sum exactly as FedAvg's
    # (weighted_average), so sigma = 0 and C = inf reproduce FedAvg's uniform weights bit for bit.
    return weighted_average(U, a.to(U) / denominator)


def keyed_gaussian(numel: int, std: float, *keys: int | str, device: torch.device | str | None = None) -> Tensor:
    """``N(0, std^2 I)`` of length ``numel`` in fp32 from a generator keyed ``keys`` (e.g. ``(seed, t, "dp_noise")``).

    Drawn once on the CPU (the same stream on every device) and moved to ``device``.
    """
    noise = torch.randn(numel, generator=generator_for(*keys), dtype=torch.float32)
    return (noise * std).to(device) if device is not None else noise * std


def noised_unclipped_fraction(unclipped: Tensor, sigma_b: float, expected_cohort: float, *keys: int | str) -> float:
    """``b̄ = clamp((sum_S (b_k - 1/2) + N(0, sigma_b^2)) / m + 1/2, 0, 1)``, the noise keyed ``keys``.

    Args:
        unclipped: ``(K_t,)`` bool, ``b_k = 1[||u_k|| <= C_t]`` (before clipping).
        sigma_b: The count's noise std.
        expected_cohort: ``m = qN``.
    """
    noise = float(torch.randn(1, generator=generator_for(*keys), dtype=torch.float64)) * sigma_b
    centred = float(unclipped.double().sum()) - 0.5 * unclipped.numel()
    return min(max((centred + noise) / expected_cohort + 0.5, 0.0), 1.0)


def bounded_information(x: Tensor, i_max: float = 10.0) -> Tensor:
    """``I(x) = min(-log2(max(x, 2^-I_max)), I_max) / I_max``, in ``[0, 1]``: FedFa's information quantity, bounded.

    Example:
        >>> bounded_information(torch.tensor([1.0, 0.5, 0.0])).tolist()
        [0.0, 0.1, 1.0]
    """
    floor = 2.0 ** -i_max
    # 0 - log2 rather than -log2: x = 1 gives +0.0, not -0.0.
    return torch.clamp(0.0 - torch.log2(torch.clamp(x.double(), min=floor)), max=i_max) / i_max


def dp_safe_fedfa_weights(accuracy: Tensor, past_participations: Tensor, round_idx: int, alpha: float, beta: float,
                          i_max: float = 10.0) -> Tensor:
    """DP-safe FedFa (ours): ``a_k = alpha I(acc_k) + beta I(1 - f_k / (t + 1))``, in ``[0, 1]``, never normalised.

    Each weight reads client ``k``'s own accuracy and its participation count ``f_k`` (past rounds),
    which Poisson sampling makes independent of the data. A lower accuracy still earns a larger weight,
    FedFa's intent.

    Example:
        >>> dp_safe_fedfa_weights(torch.tensor([0.5, 1.0]), torch.tensor([0, 1]), 1, 0.5, 0.5).tolist()
        [0.05, 0.05]
    """
    frequency = 1.0 - past_participations.double() / (round_idx + 1)
    return alpha * bounded_information(accuracy, i_max) + beta * bounded_information(frequency, i_max)


def dp_safe_qffl_weights(losses: Tensor, q: float, f_max: float) -> Tensor:
    """DP-safe q-FFL (ours): ``a_k = (min(F_k, F_max) / F_max)^q`` in ``[0, 1]``, for a declared ``F_max``.

    Example:
        >>> dp_safe_qffl_weights(torch.tensor([0.5, 2.0, 4.0]), 2.0, 2.0).tolist()
        [0.0625, 1.0, 1.0]
    """
    return (torch.clamp(losses.double(), min=0.0, max=f_max) / f_max) ** q


def dp_safe_ish_weights(label_histograms: Tensor, expected_cohort: float, eta_ish: float = 1.0,
                        population: Tensor | None = None) -> Tensor:
    """DP-safe DWFed (ours): ``ISH_k = max(0, (1 - eta D_k / K) / (1 + D_k))`` against a public ``P``.

    ``D_k = sum_c |p_k(c) - P(c)|`` reads client ``k``'s own labels and the public ``P`` only (uniform
    ``1/C`` by default, or a declared distribution), ``K := qN`` (the realised cohort size would couple
    the clients), and ``ISH_k in [0, 1]`` is not normalised over the cohort.

    Example:
        >>> dp_safe_ish_weights(torch.tensor([[5, 5], [10, 0]]), 2.0).tolist()  # D = (0, 1)
        [1.0, 0.25]
    """
    counts = label_histograms.double()
    p = counts / counts.sum(dim=1, keepdim=True).clamp_min(1)
    public = torch.full((counts.shape[1],), 1.0 / counts.shape[1], dtype=torch.float64) if population is None \
        else population.double().to(counts.device)
    emd = (p - public).abs().sum(dim=1)
    return ((1.0 - eta_ish * emd / expected_cohort) / (1.0 + emd)).clamp_min(0.0)


def next_clip_norm(clip_norm: float, fraction: float, target_quantile: float, learning_rate: float) -> float:
    """``C_{t+1} = C_t exp(-eta_C (b̄ - gamma))``: the geometric update toward the ``gamma`` quantile of the norms.

    Example:
        >>> round(next_clip_norm(1.0, 1.0, 0.5, 0.2), 6)  # every update fit: shrink by exp(-0.1)
        0.904837
    """
    return clip_norm * math.exp(-learning_rate * (fraction - target_quantile))


__all__ = ["ESTIMATORS", "bounded_information", "dp_safe_fedfa_weights", "dp_safe_ish_weights",
           "dp_safe_qffl_weights", "dp_weights", "fixed_denominator_sum", "keyed_gaussian", "next_clip_norm",
           "noised_unclipped_fraction"]
