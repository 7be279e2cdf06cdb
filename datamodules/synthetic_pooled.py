"""Pooled Synthetic-IID samples partitioned like a real dataset (label skew without a download)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from typing_extensions import override

from lightning_fl.datamodules.partitions import Dirichlet, Partition
from lightning_fl.datamodules.pooled import PooledDataModule
from lightning_fl.faults.validation import ConfigError, check_positive


def generate_synthetic_pool(num_samples: int, num_features: int = 60, num_classes: int = 10,
                            seed: int = 0, max_draws: int = 20_000_000) -> tuple[Tensor, Tensor]:
    """Class-balanced draws of the Synthetic-IID model (docs/algorithms.md, Data).

    One ``W, b ~ N(0, 1)``, ``x ~ N(0, Sigma)`` with ``Sigma = diag(j^-1.2)``, ``y = argmax(x W + b)``.
    The argmax of a random linear model makes some classes rare (well under 1%), which would leave
    label-skew partitions nothing to skew, so samples are drawn until every class has
    ``num_samples / num_classes`` of them (rejection sampling: the model is unchanged, the label
    marginal becomes uniform).

    Raises:
        ConfigError: If a class stays too rare within ``max_draws`` samples.
    """
    rng = np.random.default_rng([seed, 7919])
    w, b = rng.normal(0, 1, (num_features, num_classes)), rng.normal(0, 1, num_classes)
    std_x = np.power(np.arange(1, num_features + 1, dtype=np.float64), -1.2) ** 0.5
    per_class = -(-num_samples // num_classes)
    kept: list[list[np.ndarray]] = [[] for _ in range(num_classes)]
    counts = np.zeros(num_classes, dtype=np.int64)
    drawn = 0
    while counts.min() < per_class:
        if drawn >= max_draws:
            raise ConfigError(f"num_samples={num_samples} needs more than {max_draws} draws to balance the classes;"
                              " use fewer samples or another seed")
        x = (rng.standard_normal((100_000, num_features)) * std_x).astype(np.float32)
        y = np.argmax(x @ w + b, axis=1)
        drawn += len(y)
        for c in np.flatnonzero(counts < per_class):
            take = x[y == c][: per_class - counts[c]]
            kept[c].append(take)
            counts[c] += len(take)
    xs = np.concatenate([np.concatenate(parts) for parts in kept])
    ys = np.repeat(np.arange(num_classes), per_class)
    order = rng.permutation(len(ys))[:num_samples]
    return torch.from_numpy(xs[order]), torch.from_numpy(ys[order].astype(np.int64))


class PooledSyntheticDataModule(PooledDataModule):
    """Synthetic-IID samples pooled and split by a partition (by default Dirichlet label skew).

    The quick stand-in for an image dataset when a partition, not the natural users of the
    Synthetic(alpha, beta) generator, should create the heterogeneity (Tempo's Dirichlet setting on
    synthetic data).

    Args:
        num_samples: Size of the pool.
        num_features: Input dimension.
        partition: A :class:`~lightning_fl.datamodules.partitions.Partition`; ``None`` is
            ``Dirichlet(alpha=0.1, min_size=2, cap_at_mean=True)`` (Tempo's skew, feasible for 200 clients).
        num_clients: Number of clients.
        seed: Seed of the pool, the partition and the train/test split.
        test_fraction: Fraction of each client's samples held out for testing, in ``[0, 1)``.
        val_fraction: Fraction of each client's training samples moved to its validation split, in ``[0, 1)``; ``0``: none (the papers' exact training sets).

    Example (YAML)::

        data:
          class_path: lightning_fl.datamodules.PooledSyntheticDataModule
          init_args:
            num_samples: 20000
            num_clients: 200
            partition:
              class_path: lightning_fl.datamodules.partitions.Dirichlet
              init_args: {alpha: 0.1, min_size: 2, cap_at_mean: true}
    """

    def __init__(self, num_samples: int = 20000, num_features: int = 60, partition: Partition | None = None,
                 num_clients: int = 200, seed: int = 0, test_fraction: float = 0.2,
                 val_fraction: float = 0.1) -> None:
        check_positive("num_samples", num_samples, integer=True)
        check_positive("num_features", num_features, integer=True)
        if partition is None:
            partition = Dirichlet(alpha=0.1, min_size=2, cap_at_mean=True)
        super().__init__(partition=partition, num_clients=num_clients, num_classes=10, seed=seed,
                         test_fraction=test_fraction, val_fraction=val_fraction)
        self.num_samples = num_samples
        self.num_features = num_features

    @override
    def load_pooled(self) -> tuple[Tensor, Tensor]:
        return generate_synthetic_pool(self.num_samples, self.num_features, 10, self.seed)
