"""Label-distribution statistics shared by the data reports and DWFed (docs/algorithms.md, DWFed)."""

from __future__ import annotations

import torch
from torch import Tensor


def label_distributions(histograms: Tensor) -> Tensor:
    """Row-normalise ``(N, C)`` label counts into per-client distributions ``p_k`` (empty rows stay 0)."""
    counts = histograms.to(torch.float64)
    totals = counts.sum(dim=1, keepdim=True)
    return torch.where(totals > 0, counts / totals.clamp_min(1), torch.zeros_like(counts))


def population_distribution(histograms: Tensor) -> Tensor:
    """``P``: the normalised sum of all clients' label histograms (docs/algorithms.md, DWFed)."""
    total = histograms.to(torch.float64).sum(dim=0)
    return total / total.sum().clamp_min(1)


def emd_to_population(histograms: Tensor) -> Tensor:
    """``D_k = sum_c |p_k(c) - P(c)|`` for every client (docs/algorithms.md, DWFed, DWFed eq. 7), in float64."""
    return (label_distributions(histograms) - population_distribution(histograms)).abs().sum(dim=1)


def wasserstein_1d(p: Tensor, q: Tensor) -> Tensor:
    """1-D earth mover's distance between distributions over the indices ``0..C-1`` (unit spacing).

    ``W(p, q) = sum_{c=0}^{C-2} |F_p(c) - F_q(c)|`` with ``F_p(c) = sum_{j<=c} p(j)``: the mass that must
    cross the gap between index ``c`` and ``c + 1``, summed over the ``C - 1`` gaps. Unlike the L1 form
    it depends on the order of the labels (moving mass from class 0 to class 9 costs 9, to class 1 costs 1).

    Args:
        p: ``(..., C)`` distributions (rows summing to 1, or 0 for an empty client).
        q: ``(C,)`` or ``(..., C)``, broadcast against ``p``.

    Returns:
        ``(...)`` distances in ``p``'s floating dtype (float64 for integer input).

    Example:
        >>> wasserstein_1d(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 0.0, 1.0]))  # 1 crosses 2 gaps
        tensor(2.)
    """
    p = p if p.is_floating_point() else p.to(torch.float64)
    gaps = torch.cumsum(p, dim=-1) - torch.cumsum(q.to(p), dim=-1)
    # The last cumulative sums are both 1 (the total mass): that term is 0 and the formula leaves it out.
    return gaps[..., :-1].abs().sum(dim=-1)


def wasserstein_to_population(histograms: Tensor) -> Tensor:
    """``D_k = sum_{c=0}^{C-2} |F_k(c) - F_P(c)|`` for every client, in float64 (docs/algorithms.md, DWFed).

    The order-dependent reading of DWFed's eq. 7 (``distance: wasserstein``): :func:`wasserstein_1d`
    between each ``p_k`` and the population ``P``.

    Example:
        >>> wasserstein_to_population(torch.tensor([[2, 0, 0], [0, 0, 2]]))  # P = [0.5, 0, 0.5]
        tensor([1., 1.], dtype=torch.float64)
    """
    return wasserstein_1d(label_distributions(histograms), population_distribution(histograms))
