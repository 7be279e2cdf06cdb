"""Federations made by partitioning one pooled labelled dataset (SPEC section 8).

:class:`PooledDataModule` takes ``(x, y)`` tensors (or loads them in an overridden
:meth:`~PooledDataModule.load_pooled`), splits the samples among clients with one of the seeded
partitions of :mod:`lightning_fl.datamodules.partition`, then splits every client into train and test.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from typing_extensions import override

from lightning_fl.datamodule import FederatedDataModule
from lightning_fl.datamodules.assemble import build_from_pooled
from lightning_fl.data import FederatedData
from lightning_fl.datamodules.partition import PARTITIONS, QUANTITY_DISTRIBUTIONS, make_partition, validate_partition
from lightning_fl.seeding import generator_for
from lightning_fl.validation import ConfigError, check_choice, check_positive

__all__ = ["PooledDataModule"]


class PooledDataModule(FederatedDataModule):
    """Partition a pooled dataset into clients: IID, Dirichlet, ``#C = k`` shards or quantity skew (SPEC section 8).

    Argument checks that need no data run in ``__init__`` (an unknown partition fails at once); those
    that need the labels (``num_clients`` against the sample count, ``classes_per_client`` against the
    classes present, ``min_size * num_clients``) run in ``__init__`` when ``x, y`` are given, otherwise
    in :meth:`setup`. The partition and the per-client train/test split draw from independent seeded
    streams, so changing ``test_fraction`` does not move samples between clients.

    Args:
        x: ``(n, ...)`` pooled inputs, or ``None`` when a subclass overrides :meth:`load_pooled`.
        y: ``(n,)`` integer labels (with ``x``).
        partition: One of ``iid``, ``dirichlet``, ``shards``, ``quantity``.
        num_clients: Number of clients.
        dirichlet_alpha: Dirichlet concentration (``dirichlet``); smaller is more skewed.
        dirichlet_cap_at_mean: NIID-Bench's rule: no share of further classes for clients already above
            the mean size (makes small ``alpha`` feasible for many clients).
        min_size: Minimum samples per client before the train/test split (``dirichlet`` and
            ``quantity``).
        classes_per_client: Shards, i.e. classes, per client (``shards``; 1 = one class per client).
        quantity_distribution: ``lognormal`` or ``power_law`` client sizes (``quantity``).
        quantity_sigma: Lognormal shape (``quantity`` with ``lognormal``).
        quantity_power: Pareto tail index (``quantity`` with ``power_law``).
        num_classes: Number of classes; ``None`` infers ``max(y) + 1``.
        seed: Seed of the partition and of the train/test split.
        test_fraction: Fraction of each client's samples held out for testing, in ``[0, 1)``.

    Raises:
        ConfigError: For an unknown partition or distribution, or any out-of-range value (one line
            naming the field).

    Example:
        >>> x, y = torch.randn(200, 5), torch.arange(200) % 4
        >>> dm = PooledDataModule(x, y, partition="shards", num_clients=8, classes_per_client=1)
        >>> dm.setup()
        >>> (dm.label_histograms() > 0).sum(dim=1).tolist()
        [1, 1, 1, 1, 1, 1, 1, 1]
    """

    def __init__(
        self,
        x: Tensor | None = None,
        y: Tensor | None = None,
        partition: str = "iid",
        num_clients: int = 10,
        dirichlet_alpha: float = 0.5,
        dirichlet_cap_at_mean: bool = False,
        min_size: int = 10,
        classes_per_client: int = 2,
        quantity_distribution: str = "lognormal",
        quantity_sigma: float = 1.0,
        quantity_power: float = 1.5,
        num_classes: int | None = None,
        seed: int = 0,
        test_fraction: float = 0.2,
    ) -> None:
        super().__init__(seed=seed, test_fraction=test_fraction)
        check_choice("partition", partition, PARTITIONS)
        check_positive("num_clients", num_clients, integer=True)
        check_positive("dirichlet_alpha", dirichlet_alpha)
        check_positive("min_size", min_size, integer=True)
        check_positive("classes_per_client", classes_per_client, integer=True)
        check_choice("quantity_distribution", quantity_distribution, QUANTITY_DISTRIBUTIONS)
        check_positive("quantity_sigma", quantity_sigma)
        check_positive("quantity_power", quantity_power)
        if num_classes is not None:
            check_positive("num_classes", num_classes, integer=True)
        if (x is None) != (y is None):
            raise ConfigError("x and y must be given together (or neither, when load_pooled is overridden)")
        self.partition = partition
        self._num_clients = num_clients
        self.dirichlet_alpha = dirichlet_alpha
        self.dirichlet_cap_at_mean = dirichlet_cap_at_mean
        self.min_size = min_size
        self.classes_per_client = classes_per_client
        self.quantity_distribution = quantity_distribution
        self.quantity_sigma = quantity_sigma
        self.quantity_power = quantity_power
        self._num_classes = num_classes
        self._x, self._y = x, y
        if x is not None and y is not None:
            self._check_pooled(x, y)

    def load_pooled(self) -> tuple[Tensor, Tensor]:
        """Return the pooled ``(x, y)``; override to load a dataset lazily (called once, in :meth:`setup`).

        Raises:
            ConfigError: If no tensors were given to the constructor and the method is not overridden.
        """
        if self._x is None or self._y is None:
            raise ConfigError(f"{type(self).__name__} needs x and y tensors, or a load_pooled() override")
        return self._x, self._y

    def partition_options(self) -> dict[str, Any]:
        """The options of the configured partition, as :func:`~lightning_fl.datamodules.partition.make_partition` takes them."""
        if self.partition == "dirichlet":
            return {"alpha": self.dirichlet_alpha, "min_size": self.min_size, "cap_at_mean": self.dirichlet_cap_at_mean}
        if self.partition == "shards":
            return {"classes_per_client": self.classes_per_client}
        if self.partition == "quantity":
            return {
                "distribution": self.quantity_distribution,
                "sigma": self.quantity_sigma,
                "power": self.quantity_power,
                "min_size": self.min_size,
            }
        return {}

    @override
    def build_data(self) -> FederatedData:
        x, y = self.load_pooled()
        y = self._check_pooled(x, y)
        clients = make_partition(
            self.partition, y, self._num_clients, generator_for(self.seed, "partition"), **self.partition_options()
        )
        return build_from_pooled(
            x, y, clients, self._infer_num_classes(y), self.test_fraction, generator_for(self.seed, "train_test_split")
        )

    def _infer_num_classes(self, y: Tensor) -> int:
        return self._num_classes if self._num_classes is not None else int(y.max()) + 1

    def _check_pooled(self, x: Tensor, y: Tensor) -> Tensor:
        """Validate pooled tensors against the options; returns ``y`` as ``long``."""
        y = torch.as_tensor(y)
        if y.ndim != 1 or y.is_floating_point() or y.dtype == torch.bool:
            raise ConfigError(f"y must be a 1-D integer label tensor; got dtype {y.dtype} and shape {tuple(y.shape)}")
        if len(x) != len(y):
            raise ConfigError(f"x and y must have the same number of samples; got {len(x)} and {len(y)}")
        if len(y) == 0:
            raise ConfigError("x and y must hold at least one sample")
        num_classes = self._infer_num_classes(y)
        if int(y.min()) < 0 or int(y.max()) >= num_classes:
            raise ConfigError(
                f"labels must lie in [0, {num_classes}) (num_classes); got {int(y.min())}..{int(y.max())}"
            )
        validate_partition(self.partition, y, self._num_clients, **self.partition_options())
        return y.long()
