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
