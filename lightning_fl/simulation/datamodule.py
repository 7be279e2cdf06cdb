"""Base class of every federated datamodule (docs/algorithms.md, Data).

A :class:`FederatedDataModule` builds one :class:`~lightning_fl.state.data.FederatedData` (all clients'
train/test splits as a few contiguous tensors) and exposes it to the federated loop as
``self.data``. Its Lightning dataloaders are only "round tickets": one element, no batching, so a
Lightning epoch is exactly one communication round and the loop reads client data from ``self.data``.
The concrete datamodules live in :mod:`lightning_fl.datamodules`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch  # noqa: F401 (the Example below uses it)
from matplotlib.figure import Figure
from torch import Tensor
from torch.utils.data import DataLoader

from lightning_fl.faults.validation import ConfigError, check_test_fraction, check_val_fraction
from lightning_fl.functional.label_stats import emd_to_population
from lightning_fl.reporting.partition_figure import label_distribution_figure
from lightning_fl.state.data import ClientData, FederatedData, offsets_from_sizes, split_validation  # noqa: F401
from lightning_fl.state.init_args import RecordsInitArgs

__all__ = ["FederatedDataModule"]


class FederatedDataModule(RecordsInitArgs, pl.LightningDataModule, ABC):
    """Base of the federated datamodules: builds ``self.data`` once and hands out round tickets (docs/algorithms.md, Data).

    Subclasses implement :meth:`build_data`. After :meth:`setup`, ``data``, ``num_clients``,
    ``num_classes`` and ``input_shape`` are available, along with the partition reports
    (:meth:`label_histograms`, :meth:`emd_to_population`, :meth:`partition_figure`,
    :meth:`partition_summary`).

    Args:
        seed: Seed of the data generation / partition / train-test split.
        test_fraction: Fraction of each client's samples held out for testing, in ``[0, 1)``.
        val_fraction: Fraction of each client's *training* samples moved to its validation split, in
            ``[0, 1)`` (default 0.1). The test split (or the data set's official test set) is not
            touched. Client ``k`` gives ``round(val_fraction * n_k)`` samples (at most ``n_k - 1``: it
            keeps at least one training sample), chosen by a permutation that depends only on ``seed``
            and ``k`` (:func:`~lightning_fl.state.data.split_validation`). ``0`` keeps the papers' exact
            training sets; then no ``val/*`` metric is logged.

    Raises:
        ConfigError: If ``test_fraction`` or ``val_fraction`` is outside ``[0, 1)`` or ``seed`` is not an
            integer.

    Example:
        >>> class Two(FederatedDataModule):
        ...     def build_data(self):
        ...         x, y = torch.randn(8, 2), torch.tensor([0, 1] * 4)
        ...         return FederatedData(x[:6], y[:6], offsets_from_sizes([3, 3]), x[6:], y[6:],
        ...                              offsets_from_sizes([1, 1]), num_classes=2)
        >>> dm = Two(seed=1, val_fraction=0.4)
        >>> dm.setup()
        >>> dm.num_clients, dm.label_histograms().sum().item(), dm.data.val_sizes().tolist()
        (2, 4, [1, 1])
    """

    def __init__(self, seed: int = 0, test_fraction: float = 0.2, val_fraction: float = 0.1) -> None:
        super().__init__()
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ConfigError(f"seed must be an integer; got {seed!r}")
        check_test_fraction(test_fraction)
        check_val_fraction(val_fraction)
        self.seed = seed
        self.test_fraction = float(test_fraction)
        self.val_fraction = float(val_fraction)
        self._data: FederatedData | None = None

    @abstractmethod
    def build_data(self) -> FederatedData:
        """Build every client's train/test split (called once, by :meth:`setup`, which then moves
        ``val_fraction`` of every client's training samples to its validation split, unless the
        returned data already has one)."""

    def build_source(self) -> ClientData:
        """The federation: by default :meth:`build_data`'s, with ``val_fraction`` moved to validation.

        A datamodule that produces clients on demand returns a lazy
        :class:`~lightning_fl.state.data.ClientData` source instead (``SyntheticDataModule(lazy=True)``).
        """
        data = self.build_data()
        if not isinstance(data, FederatedData):
            name = type(self).__name__
            raise TypeError(f"{name}.build_data must return FederatedData; got {type(data).__name__}")
        return split_validation(data, self.val_fraction, self.seed)

    def setup(self, stage: str | None = None) -> None:
        """Build ``self.data`` on the first call; later calls (any stage) do nothing."""
        if self._data is None:
            self._data = self.build_source()

    @property
    def is_lazy(self) -> bool:
        """Whether the clients' samples are produced when a round stages them (not all in memory)."""
        return not isinstance(self.data, FederatedData)

    @property
    def has_label_histograms(self) -> bool:
        """Whether the ``(N, C)`` label histograms are at hand (in memory; a lazy source does not count them)."""
        return not self.is_lazy

    @property
    def data(self) -> FederatedData | ClientData:
        """The federation built by :meth:`setup` (a lazy :class:`ClientData` source when :attr:`is_lazy`)."""
        if self._data is None:
            raise RuntimeError(f"{type(self).__name__}.data is not built yet; call setup() first")
        return self._data

    @property
    def num_clients(self) -> int:
        return self.data.num_clients

    @property
    def num_classes(self) -> int:
        return self.data.num_classes

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.data.input_shape

    # ------------------------------------------------------------------ round tickets
    def _round_ticket(self) -> DataLoader:
        # One element, batch_size=None: Lightning runs one "batch" per epoch, which the federated
        # loop turns into one communication round; client data never goes through a DataLoader.
        return DataLoader([0], batch_size=None)

    def train_dataloader(self) -> DataLoader:
        return self._round_ticket()

    def val_dataloader(self) -> DataLoader:
        return self._round_ticket()

    def test_dataloader(self) -> DataLoader:
        return self._round_ticket()

    # ------------------------------------------------------------------ partition reports
    def label_histograms(self) -> Tensor:
        """``(N, C)`` ``long`` label counts of every client's train split (eager federations only)."""
        if self.is_lazy:
            raise ConfigError(f"{type(self).__name__} is lazy (data.lazy: true): its (N, C) label histograms are not"
                              " counted; use data.lazy: false")
        return self.data.label_histograms("train").cpu()

    def emd_to_population(self) -> Tensor:
        """``(N,)`` ``D_k = sum_c |p_k(c) - P(c)|`` of the train splits (docs/algorithms.md, DWFed), float64."""
        return emd_to_population(self.label_histograms())

    def partition_figure(self) -> Figure:
        """Clients x classes heat map of the train label distributions (for TensorBoard ``add_figure``)."""
        title = f"{type(self).__name__}: train labels per client"
        return label_distribution_figure(self.label_histograms(), title=title)

    def partition_summary(self) -> dict[str, Any]:
        """Plain numbers describing the partition: clients, train-size min/median/max, mean EMD.

        The mean EMD is left out for real-valued targets (``num_classes == 0``: there are no labels) and for a
        lazy federation (its label histograms are not counted).
        """
        sizes = self.data.sizes("train").cpu().numpy()
        summary = {
            "num_clients": self.num_clients,
            "num_classes": self.num_classes,
            "train_size_min": int(sizes.min()),
            "train_size_median": float(np.median(sizes)),
            "train_size_max": int(sizes.max()),
            "train_samples": int(sizes.sum()),
            "val_samples": int(self.data.sizes("val").sum()) if self.data.has_validation else 0,
            "test_samples": int(self.data.sizes("test").sum()),
        }
        if self.num_classes > 0 and self.has_label_histograms:
            summary["mean_emd"] = float(self.emd_to_population().mean())
        return summary
