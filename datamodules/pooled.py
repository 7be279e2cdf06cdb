"""Federations made by partitioning one pooled labelled dataset (docs/algorithms.md, Data).

:class:`PooledDataModule` takes ``(x, y)`` tensors (or loads them in an overridden
:meth:`~PooledDataModule.load_pooled`), splits the samples among clients with one of the seeded
partitions of :mod:`lightning_fl.datamodules.partitions`, then splits every client into train and test.
"""

from __future__ import annotations

import torch
from torch import Tensor
from typing_extensions import override

from lightning_fl.datamodules.assemble import build_from_pooled
from lightning_fl.datamodules.partitions import IID, Partition
from lightning_fl.datamodules.partitions.base import not_a_partition
from lightning_fl.faults.validation import ConfigError, check_positive
from lightning_fl.simulation.datamodule import FederatedDataModule
from lightning_fl.state.data import FederatedData
from lightning_fl.state.seeding import generator_for

__all__ = ["PooledDataModule"]


def _check_partition(partition: Partition | None, default: Partition) -> Partition:
    """``partition``, or ``default`` for ``None``, after checking it is a :class:`Partition`.

    Raises:
        ConfigError: For anything else, e.g. a partition name from the old string form.
    """
    if partition is None:
        return default
    if not isinstance(partition, Partition):
        raise ConfigError(not_a_partition(partition))
    return partition


class PooledDataModule(FederatedDataModule):
    """Partition a pooled dataset into clients: IID, Dirichlet, ``#C = k`` shards, quantity skew, ... (docs/algorithms.md, Data).

    The partition's own options are checked when it is constructed; the checks that need the labels
    (``num_clients`` against the sample count, ``classes_per_client`` against the classes present,
    ``min_size * num_clients``) run in ``__init__`` when ``x, y`` are given, otherwise in
    :meth:`setup`, before anything is drawn. The partition and the per-client train/test split draw
    from independent seeded streams, so changing ``test_fraction`` does not move samples between
    clients.

    Args:
        x: ``(n, ...)`` pooled inputs, or ``None`` when a subclass overrides :meth:`load_pooled`.
        y: ``(n,)`` integer labels (with ``x``).
        partition: How samples are dealt to clients: a
            :class:`~lightning_fl.datamodules.partitions.Partition` (``IID``, ``Dirichlet``,
            ``Shards``, ``Quantity``, ``PerClientDirichlet``, ``PowerLawClasses``); ``None`` is ``IID()``.
        num_clients: Number of clients.
        num_classes: Number of classes; ``None`` infers ``max(y) + 1``.
        seed: Seed of the partition and of the train/test split.
        test_fraction: Fraction of each client's samples held out for testing, in ``[0, 1)``.
        val_fraction: Fraction of each client's training samples moved to its validation split, in ``[0, 1)``; ``0``: none (the papers' exact training sets).

    Raises:
        ConfigError: For a ``partition`` that is not a Partition, or any out-of-range value (one line
            naming the field); at setup, for ``test_fraction > 0`` with a partition whose clients share
            samples (``PerClientDirichlet(replacement=True)``).

    Example:
        >>> from lightning_fl.datamodules.partitions import Shards
        >>> x, y = torch.randn(200, 5), torch.arange(200) % 4
        >>> dm = PooledDataModule(x, y, partition=Shards(classes_per_client=1), num_clients=8)
        >>> dm.setup()
        >>> (dm.label_histograms() > 0).sum(dim=1).tolist()
        [1, 1, 1, 1, 1, 1, 1, 1]

    Example (YAML)::

        data:
          class_path: lightning_fl.datamodules.DigitsDataModule
          init_args:
            num_clients: 20
            partition: {class_path: lightning_fl.datamodules.partitions.Dirichlet, init_args: {alpha: 0.5}}
    """

    def __init__(
        self,
        x: Tensor | None = None,
        y: Tensor | None = None,
        partition: Partition | None = None,
        num_clients: int = 10,
        num_classes: int | None = None,
        seed: int = 0,
        test_fraction: float = 0.2,
        val_fraction: float = 0.1,
    ) -> None:
        super().__init__(seed=seed, test_fraction=test_fraction, val_fraction=val_fraction)
        self.partition = _check_partition(partition, IID())
        check_positive("num_clients", num_clients, integer=True)
        if num_classes is not None:
            check_positive("num_classes", num_classes, integer=True)
        if (x is None) != (y is None):
            raise ConfigError("x and y must be given together (or neither, when load_pooled is overridden)")
        self._num_clients = num_clients
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

    @override
    def build_data(self) -> FederatedData:
        if self.partition.shares_samples and self.test_fraction > 0:
            raise ConfigError(
                f"test_fraction must be 0 with {self.partition!r}: clients share samples, so one client's test"
                " split would hold another's training samples; use an official test set (test_set: official)"
                " or partition.replacement: false"
            )
        x, y = self.load_pooled()
        y = self._check_pooled(x, y)
        clients = self.partition(y, self._num_clients, generator_for(self.seed, "partition"))
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
        self.partition.validate(y, self._num_clients)
        return y.long()
