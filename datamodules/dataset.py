"""Any map-style ``torch.utils.data.Dataset`` as a federation (docs/datasets.md, Your own Dataset).

:class:`DatasetDataModule` reads every sample through ``__getitem__``, checks it (one line naming
``data.dataset`` and what ``__getitem__`` returned), stacks the samples into pooled ``(x, y)`` tensors and
then does exactly what :class:`~lightning_fl.datamodules.PooledDataModule` does with them: the same
partition and train/test streams, so the same tensors give bitwise the same federation. With
``lazy=True`` it keeps per-client index arrays instead and reads ``dataset[i]`` when a round stages the
client (:mod:`lightning_fl.datamodules.lazy_dataset`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
from torch import Tensor
from torch.utils.data import Dataset
from typing_extensions import override

from lightning_fl.datamodules.assemble import check_indices
from lightning_fl.datamodules.dataset_items import dataset_length, read_sample
from lightning_fl.datamodules.lazy_dataset import LazyDatasetData, deal_test_indices, read_labels, split_client_indices
from lightning_fl.datamodules.partitions import Partition
from lightning_fl.datamodules.pooled import PooledDataModule
from lightning_fl.datamodules.train_test_pool import deal_by_label
from lightning_fl.faults.validation import ConfigError
from lightning_fl.state.data import ClientData, FederatedData, offsets_from_sizes
from lightning_fl.state.seeding import generator_for

__all__ = ["DatasetDataModule", "dataset_config_error", "stack_dataset"]

# jsonargparse 4.53's report on a bad ``dataset``/``test_dataset`` (pinned in requirements.lock).
_DATASET_KEY = re.compile(r'Parser key "(dataset|test_dataset)":\n\s*(.+)(?:\n\s*(.+))?')
_CLASS_PROBLEM = re.compile(r"Problem with given class_path '([^']+)':")


def dataset_config_error(report: str) -> str | None:
    r"""One line for jsonargparse's parse-error ``report`` when ``data.dataset``/``data.test_dataset`` is at fault.

    jsonargparse checks the class path while parsing (before any of our code runs) and reports it in
    a dozen lines; the CLI raises this line instead. ``None`` when the report is about something else.

    Example:
        >>> dataset_config_error('Parser key "data":\n  - Problem with ...:\n    Parser key "dataset":\n'
        ...                      "      Problem with given class_path 'nope.Nope':\n        No module named 'nope'")
        "data.dataset: class_path nope.Nope cannot be used: No module named 'nope'"
    """
    match = _DATASET_KEY.search(report)
    if match is None:
        return None
    key, first, second = match.group(1), match.group(2).strip(), (match.group(3) or "").strip()
    if problem := _CLASS_PROBLEM.fullmatch(first):
        return f"data.{key}: class_path {problem.group(1)} cannot be used: {second}"
    return f"data.{key}: {first} (a map-style torch.utils.data.Dataset, as {{class_path: ..., init_args: {{...}}}})"


def stack_dataset(dataset: Dataset, field: str = "data.dataset", keys: Sequence[str] | None = None
                  ) -> tuple[Tensor, Tensor]:
    """Read ``dataset[0..len-1]`` and stack them into pooled ``(x, y)`` (the eager path).

    Args:
        dataset: A map-style Dataset (``__len__`` and ``__getitem__``) returning ``(x, y)`` or a mapping.
        field: The configuration field the errors name.
        keys: ``[input_key, label_key]`` for items that are mappings.

    Returns:
        ``x`` ``(n, ...)`` as the items' dtype, ``y`` ``(n,)`` ``long``.

    Raises:
        ConfigError: For an object without ``__len__``/``__getitem__``, an empty dataset, an item that is
            not ``(x, y)`` of tensors or numbers, inputs of different shapes, a non-integer or
            non-scalar label, or an index below ``len`` that ``__getitem__`` refuses (one line naming ``field``).

    Example:
        >>> stack_dataset([(torch.ones(2), 1), (torch.zeros(2), 0)])[1].tolist()
        [1, 0]
    """
    n = dataset_length(dataset, field)
    xs, ys = [], []
    for i in range(n):
        x, y = read_sample(dataset, i, field, keys)
        if xs and x.shape != xs[0].shape:
            raise ConfigError(f"{field}[{i}] returned an input of shape {tuple(x.shape)}; {field}[0]'s is"
                              f" {tuple(xs[0].shape)} (all inputs must have one shape)")
        xs.append(x)
        ys.append(y)
    return torch.stack(xs), torch.stack(ys).long()


class DatasetDataModule(PooledDataModule):
    """A map-style ``torch.utils.data.Dataset`` split among clients by a partition (docs/datasets.md, Your own Dataset).

    Every sample is read once, in :meth:`setup`, through ``__getitem__`` and stacked (the eager path: the
    federation then lives in memory as with every other datamodule). The pooled samples are
    partitioned and split exactly as :class:`~lightning_fl.datamodules.PooledDataModule` splits
    tensors ``x, y``, so the results are bitwise the same.

    Args:
        dataset: The training data (all of it, with ``test_fraction``), any map-style Dataset whose items are
            ``(x, y)``: an input tensor (or array, or number) and an integer class label.
        test_dataset: An official test set: then ``dataset`` is partitioned for training only and
            ``test_dataset`` is dealt to the clients class by class in proportion to their training labels
            (as ``test_set: official`` of MNIST); ``test_fraction`` is not used. ``None``: each client's
            share is split ``1 - test_fraction`` / ``test_fraction``.
        keys: ``[input_key, label_key]`` when the items are mappings (``{"image": ..., "label": ...}``).
        partition: A :class:`~lightning_fl.datamodules.partitions.Partition`; ``None`` is ``IID()``.
        num_clients: Number of clients.
        num_classes: Number of classes; ``None`` infers ``max(y) + 1`` from ``dataset``.
        seed: Seed of the partition and of the splits.
        test_fraction: Fraction of each client's samples held out for testing (without ``test_dataset``).
        val_fraction: Fraction of each client's training samples moved to its validation split.
        lazy: Keep the Dataset and per-client index arrays only (docs/datasets.md, Your own Dataset): set-up
            reads the labels (``labels()``, ``targets``, or one pass keeping only the label) and
            ``dataset[0]``; each round reads ``dataset[i]`` for the staged clients' indices only
            (:class:`~lightning_fl.datamodules.lazy_dataset.LazyDatasetData`). The federation is bitwise
            that of ``lazy: false``.

    Raises:
        ConfigError: At setup, before anything trains, for a sample that is not ``(x, y)`` of tensors or
            numbers, an empty dataset, or a partition index outside the dataset (one line naming the field);
            in ``__init__``, for the options :class:`PooledDataModule` checks.

    Example:
        >>> from lightning_fl.datamodules.dataset_examples import GaussianClassesDataset
        >>> dm = DatasetDataModule(GaussianClassesDataset(num_samples=80, num_features=5), num_clients=4)
        >>> dm.setup()
        >>> dm.num_clients, dm.num_classes, dm.input_shape
        (4, 4, (5,))

    Example (YAML)::

        data:
          class_path: lightning_fl.datamodules.DatasetDataModule
          init_args:
            dataset: {class_path: my_package.MyDataset, init_args: {root: data/mine}}
            partition: {class_path: lightning_fl.datamodules.partitions.Dirichlet, init_args: {alpha: 0.5}}
            num_clients: 20
    """

    def __init__(self, dataset: Dataset, test_dataset: Dataset | None = None, keys: list[str] | None = None,
                 partition: Partition | None = None, num_clients: int = 10, num_classes: int | None = None,
                 seed: int = 0, test_fraction: float = 0.2, val_fraction: float = 0.1, lazy: bool = False) -> None:
        super().__init__(partition=partition, num_clients=num_clients, num_classes=num_classes, seed=seed,
                         test_fraction=test_fraction, val_fraction=val_fraction)
        if keys is not None and (isinstance(keys, str) or len(keys) != 2):
            raise ConfigError(f"data.keys must be two keys, [<input>, <label>]; got {keys!r}")
        if not isinstance(lazy, bool):
            raise ConfigError(f"data.lazy must be true or false; got {lazy!r}")
        self.dataset, self.test_dataset, self.keys, self.lazy = dataset, test_dataset, keys, lazy

    @override
    def build_source(self) -> ClientData:
        if not self.lazy:
            return super().build_source()
        if self.test_dataset is None and self.partition.shares_samples and self.test_fraction > 0:
            raise ConfigError(f"test_fraction must be 0 with {self.partition!r}: clients share samples, so one client's"
                              " test split would hold another's training samples; use data.test_dataset or"
                              " partition.replacement: false")
        y = read_labels(self.dataset, "data.dataset", self.keys)
        y = self._check_pooled(y, y)  # only the length of the first argument (the inputs) is read
        clients = self.partition(y, self._num_clients, generator_for(self.seed, "partition"))
        check_indices(clients, len(y))
        num_classes = self._infer_num_classes(y)
        y_te = None
        if self.test_dataset is None:
            train, test = split_client_indices(clients, self.test_fraction, self.seed)
        else:
            y_te = read_labels(self.test_dataset, "data.test_dataset", self.keys)
            self._check_test_labels(y_te, num_classes)
            train, test = clients, deal_test_indices(clients, y, y_te, num_classes, self.seed)
        return LazyDatasetData(self.dataset, train, test, num_classes, self.seed, self.val_fraction,
                               self.test_dataset, self.keys, labels=y, test_labels=y_te)

    @staticmethod
    def _check_test_labels(y_te: Tensor, num_classes: int) -> None:
        if int(y_te.min()) < 0 or int(y_te.max()) >= num_classes:
            raise ConfigError(f"data.test_dataset labels must lie in [0, {num_classes}) (num_classes); got"
                              f" {int(y_te.min())}..{int(y_te.max())}")

    @override
    def load_pooled(self) -> tuple[Tensor, Tensor]:
        return stack_dataset(self.dataset, "data.dataset", self.keys)

    @override
    def build_data(self) -> FederatedData:
        if self.test_dataset is None:
            return super().build_data()
        x_tr, y_tr = self.load_pooled()
        x_te, y_te = stack_dataset(self.test_dataset, "data.test_dataset", self.keys)
        if x_te.shape[1:] != x_tr.shape[1:]:
            raise ConfigError(f"data.test_dataset inputs have shape {tuple(x_te.shape[1:])}; data.dataset's are"
                              f" {tuple(x_tr.shape[1:])}")
        y_tr = self._check_pooled(x_tr, y_tr)
        num_classes = self._infer_num_classes(y_tr)
        self._check_test_labels(y_te, num_classes)
        clients = self.partition(y_tr, self._num_clients, generator_for(self.seed, "partition"))
        check_indices(clients, len(y_tr))
        owner = torch.repeat_interleave(torch.arange(len(clients)), torch.tensor([len(c) for c in clients]))
        train_idx = torch.cat(clients)
        hist = torch.zeros(len(clients), num_classes, dtype=torch.long)
        hist.index_put_((owner, y_tr[train_idx]), torch.ones_like(owner), accumulate=True)
        tests = deal_by_label(hist, y_te, generator_for(self.seed, "test_deal"))
        test_idx = torch.cat(tests)
        return FederatedData(
            x_train=x_tr[train_idx], y_train=y_tr[train_idx], train_offsets=offsets_from_sizes([len(c) for c in clients]),
            x_test=x_te[test_idx], y_test=y_te[test_idx], test_offsets=offsets_from_sizes([len(t) for t in tests]),
            num_classes=num_classes,
        )

