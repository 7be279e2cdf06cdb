"""Quantity skew: unequal client sizes drawn from a heavy-tailed law, IID labels (docs/algorithms.md, Data)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from lightning_fl.datamodules.largest_remainder import largest_remainder
from lightning_fl.datamodules.partitions.base import FIELD, Partition, check_min_size
from lightning_fl.datamodules.partitions.numpy_rng import numpy_rng
from lightning_fl.faults.validation import check_choice, check_positive

__all__ = ["QUANTITY_DISTRIBUTIONS", "Quantity"]

QUANTITY_DISTRIBUTIONS = ("lognormal", "power_law")


class Quantity(Partition):
    """Quantity skew: unequal client sizes, IID labels (labels ignored).

    Client weights are drawn i.i.d. from ``lognormal(0, sigma)`` or, for ``"power_law"``, from a
    Pareto distribution with scale 1 and tail index ``power`` (density ``~ x^-(power + 1)`` for
    ``x >= 1``; smaller ``power`` = heavier tail). Every client first gets ``min_size`` samples and
    the remaining ``n - num_clients * min_size`` are shared in proportion to the weights
    (largest-remainder rounding), so the sizes sum to ``n`` exactly. Samples are then assigned by a
    random permutation, so labels are IID.

    Args:
        distribution: ``"lognormal"`` or ``"power_law"``.
        sigma: Lognormal shape (standard deviation of the log), ``> 0``; used with ``lognormal``.
        power: Pareto tail index, ``> 0``; used with ``power_law``.
        min_size: Minimum number of samples per client (``>= 1``), before any train/test split.

    Raises:
        ConfigError: If an option is out of range (here) or ``min_size * num_clients`` exceeds the
            samples (:meth:`validate`).

    Example:
        >>> parts = Quantity(min_size=20)(torch.zeros(1000, dtype=torch.long), 5, torch.Generator().manual_seed(0))
        >>> sum(len(p) for p in parts), min(len(p) for p in parts) >= 20
        (1000, True)

    Example (YAML)::

        partition:
          class_path: lightning_fl.datamodules.partitions.Quantity
          init_args: {distribution: power_law, power: 1.5, min_size: 10}
    """

    def __init__(self, distribution: str = "lognormal", sigma: float = 1.0, power: float = 1.5,
                 min_size: int = 1) -> None:
        check_choice(f"{FIELD}.distribution", distribution, QUANTITY_DISTRIBUTIONS)
        check_positive(f"{FIELD}.sigma", sigma)
        check_positive(f"{FIELD}.power", power)
        check_positive(f"{FIELD}.min_size", min_size, integer=True)
        self.distribution = distribution
        self.sigma = sigma
        self.power = power
        self.min_size = min_size

    def validate(self, labels: Tensor, num_clients: int) -> None:
        super().validate(labels, num_clients)
        check_min_size(self.min_size, num_clients, len(labels))

    def split(self, labels: Tensor, num_clients: int, generator: torch.Generator) -> list[Tensor]:
        num_samples = len(labels)
        rng = numpy_rng(generator)
        if self.distribution == "lognormal":
            weights = rng.lognormal(0.0, float(self.sigma), num_clients)
        else:
            weights = rng.pareto(float(self.power), num_clients) + 1.0
        sizes = self.min_size + largest_remainder(weights, num_samples - num_clients * self.min_size)
        perm = rng.permutation(num_samples)
        return [torch.from_numpy(np.sort(chunk)) for chunk in np.split(perm, np.cumsum(sizes)[:-1])]
