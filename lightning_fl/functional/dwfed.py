"""DWFed: aggregation weights from the index of statistical heterogeneity (docs/algorithms.md, DWFed).

``P`` is the normalised sum of *all* clients' label histograms (the server learns the histograms: a
documented privacy trade-off, as in the paper); ``D_k = sum_c |p_k(c) - P(c)|`` (EMD, L1 form,
eq. 7; computed by :func:`lightning_fl.functional.label_stats.emd_to_population`), or, with
``distance="wasserstein"``, ``D_k = sum_{c=0}^{C-2} |F_k(c) - F_P(c)|`` over the cumulative
distributions (the order-dependent reading of eq. 7;
:func:`lightning_fl.functional.label_stats.wasserstein_to_population`);
``ISH_k = (1 - eta_ish D_k / K) / (1 + D_k)`` with ``K`` the cohort size; ``ISH_k`` is clamped at 0;
``alpha_k = ISH_k / sum ISH``; ``w^{t+1} = sum_k alpha_k y_k``.

Defaults and readings documented here:

- ``distance = "l1"`` is the default. The paper remarks that the EMD depends on the order of the labels,
  which only an order-dependent distance does: ``"wasserstein"`` is that reading. On equal-size 1-class
  and 2-class shards every client has the same L1 distance (DWFed is FedAvg there) while the
  Wasserstein distances differ.
- ``eta_ish = 1`` gives eq. 12 (default); the algorithm box's variant is ``eta_ish = client lr``.
- ``weight_by_samples`` (off by default): pass ``num_samples`` and ``ISH_k`` is multiplied by ``n_k``
  before normalising.
- If every ``ISH_k`` clamps to 0 (or the sum is otherwise 0/NaN/inf), the weights fall back to uniform
  (docs/algorithms.md, Server arithmetic) and the result is reported as degenerate, except for a one-client cohort, whose
  weight is 1 regardless.
- ``D_k`` is computed over the whole population ``P`` (every client, not only the cohort);
  :func:`cohort_emd` does this and then selects the cohort.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fl.functional.label_stats import emd_to_population, wasserstein_to_population
from lightning_fl.functional.weights import as_float_like, normalize_weights

__all__ = ["DISTANCES", "cohort_emd", "distance_to_population", "ish_weights", "model_divergence"]

#: The readings of eq. 7: the L1 form (default) and the 1-D Wasserstein distance over label indices.
DISTANCES = ("l1", "wasserstein")


def distance_to_population(label_histograms: Tensor, distance: str = "l1") -> Tensor:
    """``(N,)`` float64 ``D_k`` of every client to the population under one reading of eq. 7.

    Args:
        label_histograms: ``(N, C)`` label counts of every client.
        distance: ``"l1"`` (``sum_c |p_k(c) - P(c)|``) or ``"wasserstein"``
            (``sum_{c=0}^{C-2} |F_k(c) - F_P(c)|``).

    Raises:
        ValueError: If ``distance`` is not one of :data:`DISTANCES`.

    Example:
        >>> h = torch.tensor([[2, 0, 0], [0, 2, 0], [0, 0, 2]])  # P uniform over three classes
        >>> distance_to_population(h, "l1"), distance_to_population(h, "wasserstein")
        (tensor([1.3333, 1.3333, 1.3333], dtype=torch.float64), tensor([1.0000, 0.6667, 1.0000], dtype=torch.float64))
    """
    if distance == "l1":
        return emd_to_population(label_histograms)
    if distance == "wasserstein":
        return wasserstein_to_population(label_histograms)
    raise ValueError(f"distance must be one of {', '.join(DISTANCES)}; got {distance!r}")


def cohort_emd(label_histograms: Tensor, cohort: Tensor, distance: str = "l1") -> Tensor:
    """``D_k`` of the cohort members against the population of *all* clients (docs/algorithms.md, DWFed).

    Args:
        label_histograms: ``(N, C)`` label counts of every client.
        cohort: ``(K,)`` client indices of this round's cohort.
        distance: The reading of eq. 7 (:func:`distance_to_population`); default ``"l1"``.

    Returns:
        ``(K,)`` float64 distances.

    Example:
        >>> cohort_emd(torch.tensor([[2, 0], [0, 2]]), torch.tensor([1]))
        tensor([1.], dtype=torch.float64)
    """
    emd = distance_to_population(label_histograms, distance)
    return emd[cohort.to(device=emd.device, dtype=torch.long)]


def ish_weights(
    emd: Tensor,
    cohort_size: int,
    eta_ish: float = 1.0,
    num_samples: Tensor | None = None,
) -> tuple[Tensor, bool]:
    """DWFed weights ``alpha_k`` from the cohort members' EMDs (docs/algorithms.md, DWFed).

    Args:
        emd: ``(K,)`` ``D_k`` (e.g. from :func:`cohort_emd`); its dtype is kept if floating point.
        cohort_size: ``K`` (>= 1).
        eta_ish: ``eta`` in ``ISH_k`` (default 1: eq. 12).
        num_samples: ``(K,)`` ``n_k`` to multiply ``ISH_k`` by (the ``weight_by_samples`` option), or
            ``None`` (default).

    Returns:
        ``(weights, degenerate)``; aggregate with ``weighted_average(client_w, weights)``.

    Raises:
        ValueError: If ``cohort_size < 1``.

    Example:
        >>> w, degenerate = ish_weights(torch.tensor([0.0, 1.0], dtype=torch.float64), cohort_size=2)
        >>> w  # ISH = [1, 0.25]
        tensor([0.8000, 0.2000], dtype=torch.float64)
    """
    if cohort_size < 1:
        raise ValueError(f"cohort_size must be >= 1; got {cohort_size!r}")
    d = emd if emd.is_floating_point() else emd.to(torch.float32)
    ish = ((1.0 - eta_ish * d / cohort_size) / (1.0 + d)).clamp_min(0.0)
    if num_samples is not None:
        ish = ish * as_float_like(num_samples, d)
    return normalize_weights(ish)


def model_divergence(federated_w: Tensor, centralised_w: Tensor) -> Tensor:
    """DWFed's model divergence ``||w^f - w^c|| / ||w^c||`` (eq. 2), a 0-d fp32 tensor.

    Example:
        >>> model_divergence(torch.tensor([3.0, 4.0]), torch.tensor([0.0, 5.0]))
        tensor(0.6325)
    """
    f, c = federated_w.float(), centralised_w.float()
    return torch.linalg.vector_norm(f - c) / torch.linalg.vector_norm(c)
