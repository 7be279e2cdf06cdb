"""scikit-learn's 8x8 handwritten digits, partitioned among clients (docs/algorithms.md, Data).

A small real dataset (1797 samples, 10 classes) that ships with scikit-learn, so the federated
partitions can be exercised on real images without a download.
"""

from __future__ import annotations

import torch
from torch import Tensor
from typing_extensions import override

from lightning_fl.datamodules.partitions import Partition
from lightning_fl.datamodules.pooled import PooledDataModule

__all__ = ["DigitsDataModule"]


class DigitsDataModule(PooledDataModule):
    """``sklearn.datasets.load_digits`` split among clients by any pooled partition (docs/algorithms.md, Data).

    Pixel values ``0..16`` are scaled to ``[0, 1]`` (float32). Inputs have shape ``(64,)`` when
    ``flatten`` (for logistic regression / MLP clients), otherwise ``(1, 8, 8)`` (for CNN clients).

    Args:
        num_clients: Number of clients (default 20: about 90 samples each).
        partition: A :class:`~lightning_fl.datamodules.partitions.Partition`; ``None`` is ``IID()``.
        flatten: Flatten each image to 64 features.
        seed: Seed of the partition and of the train/test split.
        test_fraction: Fraction of each client's samples held out for testing, in ``[0, 1)``.

    Raises:
        ConfigError: For a ``partition`` that is not a Partition or an out-of-range value (one line
            naming the field).

    Example:
        >>> from lightning_fl.datamodules.partitions import Dirichlet
        >>> dm = DigitsDataModule(num_clients=10, partition=Dirichlet(alpha=0.3))
        >>> dm.setup()
        >>> dm.num_clients, dm.num_classes, dm.input_shape
        (10, 10, (64,))

    Example (YAML)::

        data:
          class_path: lightning_fl.datamodules.DigitsDataModule
          init_args:
            num_clients: 30
            partition: {class_path: lightning_fl.datamodules.partitions.Shards, init_args: {classes_per_client: 2}}
    """

    def __init__(
        self,
        num_clients: int = 20,
        partition: Partition | None = None,
        flatten: bool = True,
        seed: int = 0,
        test_fraction: float = 0.2,
    ) -> None:
        super().__init__(partition=partition, num_clients=num_clients, num_classes=10, seed=seed,
                         test_fraction=test_fraction)
        self.flatten = bool(flatten)

    @override
    def load_pooled(self) -> tuple[Tensor, Tensor]:
        from sklearn.datasets import load_digits  # imported here: sklearn is slow to import

        digits = load_digits()
        x = torch.from_numpy(digits.images).float() / 16.0
        x = x.reshape(len(x), 64) if self.flatten else x.unsqueeze(1)
        return x, torch.from_numpy(digits.target).long()
