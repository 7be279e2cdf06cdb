"""Any map-style Dataset as a lazy federation: index arrays at set-up, samples read per round (docs/datasets.md).

``DatasetDataModule(lazy=True)`` reads the labels once (``labels()``, ``targets``, or one pass of
``__getitem__`` keeping only the label), partitions and splits the *indices* exactly as the eager path
partitions and splits the stacked samples (the same seeded streams, the same clients in the same order),
and hands :class:`LazyDatasetData` the per-client index arrays. Each round :meth:`LazyDatasetData.stage`
reads ``dataset[i]`` for the staged clients' indices only, converted by the eager path's own helpers, so
the staged tensors are bitwise rows of the eager federation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from lightning_fl.datamodules.dataset_items import dataset_length, read_sample
from lightning_fl.datamodules.split import split_train_test
from lightning_fl.datamodules.train_test_pool import deal_by_label
from lightning_fl.faults.validation import ConfigError
from lightning_fl.state.data import (
    FederatedData,
    assemble_staged,
    checked_stage_ids,
    client_validation_split,
    offsets_from_sizes,
    SizedClientData,
    staged_splits,
)
from lightning_fl.state.seeding import generator_for

__all__ = ["LazyDatasetData", "deal_test_indices", "read_labels", "split_client_indices"]


def read_labels(dataset: Dataset, field: str = "data.dataset", keys: Sequence[str] | None = None) -> Tensor:
    """Every sample's label, ``(n,)`` ``long``, without keeping any input.

    From ``dataset.labels()`` when the Dataset has that method, else its ``targets`` attribute (as
    torchvision's data sets have), else one pass of ``__getitem__`` that checks every item as the eager
    path does and keeps only its label. ``labels()``/``targets`` must be the labels ``__getitem__`` returns.

    Raises:
        ConfigError: For a Dataset that is not map-style or is empty, labels that are not one integer per
            sample, or an item the eager path refuses (one line naming ``field``).

    Example:
        >>> read_labels([(torch.ones(2), 1), (torch.zeros(2), 0)]).tolist()
        [1, 0]
    """
    n = dataset_length(dataset, field)
    if callable(getattr(dataset, "labels", None)):
        given, name = dataset.labels(), f"{field}.labels()"
    elif hasattr(dataset, "targets"):
        given, name = dataset.targets, f"{field}.targets"
    else:
        first_shape, labels = None, []
        for i in range(n):
            x, y = read_sample(dataset, i, field, keys)
            first_shape = x.shape if first_shape is None else first_shape
            if x.shape != first_shape:
                raise ConfigError(f"{field}[{i}] returned an input of shape {tuple(x.shape)}; {field}[0]'s is"
                                  f" {tuple(first_shape)} (all inputs must have one shape)")
            labels.append(y)
        return torch.stack(labels).long()
    y = torch.as_tensor(np.asarray(given))
    if y.ndim != 1 or len(y) != n or y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise ConfigError(f"{name} must be {n} integer labels, one per sample; got dtype {y.dtype} and shape"
                          f" {tuple(y.shape)}")
    return y.long()


def split_client_indices(clients: list[Tensor], test_fraction: float, seed: int) -> tuple[list[Tensor], list[Tensor]]:
    """Each client's ``(train, test)`` indices: the pooled path's split, clients in order from one stream.

    :func:`~lightning_fl.datamodules.assemble.build_from_pooled` splits the same way with the same
    generator key, so these are the sample indices of the eager federation's clients.

    Example:
        >>> train, test = split_client_indices([torch.arange(10), torch.arange(10, 15)], 0.2, seed=0)
        >>> [len(t) for t in train], [len(t) for t in test]
        ([8, 4], [2, 1])
    """
    generator = generator_for(seed, "train_test_split")
    splits = [split_train_test(idx, test_fraction, generator) for idx in clients]
    return [tr for tr, _ in splits], [te for _, te in splits]


def deal_test_indices(clients: list[Tensor], y_train: Tensor, y_test: Tensor, num_classes: int, seed: int
                      ) -> list[Tensor]:
    """Indices of an official test set per client, dealt by label in proportion to the clients' training labels.

    Example:
        >>> tests = deal_test_indices([torch.tensor([0, 1]), torch.tensor([2, 3])], torch.tensor([0, 0, 1, 1]),
        ...                           torch.tensor([1, 0, 1, 0]), num_classes=2, seed=0)
        >>> [sorted(y.tolist()) for y in (torch.tensor([1, 0, 1, 0])[t] for t in tests)]
        [[0, 0], [1, 1]]
    """
    owner = torch.repeat_interleave(torch.arange(len(clients)), torch.tensor([len(c) for c in clients]))
    hist = torch.zeros(len(clients), num_classes, dtype=torch.long)
    hist.index_put_((owner, y_train[torch.cat(clients)]), torch.ones_like(owner), accumulate=True)
    return deal_by_label(hist, y_test, generator_for(seed, "test_deal"))


def _joined(parts: list[Tensor]) -> tuple[Tensor, Tensor]:
    """One concatenated ``long`` index tensor and its ``N + 1`` offsets (two tensors instead of ``N``)."""
    flat = torch.cat(parts).long() if parts else torch.zeros(0, dtype=torch.long)
    return flat, offsets_from_sizes([len(p) for p in parts])


class LazyDatasetData(SizedClientData):
    """A Dataset split among clients by index, as a :class:`~lightning_fl.state.data.ClientData` source.

    Holds the Dataset and one index per training and test sample (with ``N + 1`` offsets per split);
    :meth:`stage` reads ``dataset[i]`` for the asked clients only and moves each client's validation
    samples out of its training ones with :func:`~lightning_fl.state.data.client_validation_split`, as the
    eager federation does.

    Args:
        dataset: The Dataset the training (and, without ``test_dataset``, test) indices point into.
        train_index: Per client, its training indices into ``dataset``, in the eager federation's order.
        test_index: Per client, its test indices into ``test_dataset`` (or ``dataset`` when it is ``None``).
        num_classes: Number of classes.
        seed: Seed of the validation split.
        val_fraction: Fraction of each client's training samples moved to validation (``0``: none).
        test_dataset: The official test set, or ``None``.
        keys: ``[input_key, label_key]`` for items that are mappings.
        labels: The labels the partition dealt by (from ``labels()``, ``targets`` or a pass of the items):
            :meth:`stage` checks that the items it reads carry them. ``None``: not checked.
        test_labels: The same for ``test_dataset``.

    Raises:
        ConfigError: When ``dataset[0]`` (or ``test_dataset[0]``) is not ``(x, y)`` of tensors or numbers,
            or the two Datasets' inputs differ in shape (one line naming the field), at construction.

    Example:
        >>> items = [(torch.full((2,), float(i)), i % 2) for i in range(6)]
        >>> source = LazyDatasetData(items, [torch.tensor([4, 1]), torch.tensor([2])],
        ...                          [torch.tensor([0]), torch.tensor([3, 5])], num_classes=2, val_fraction=0.0)
        >>> staged = source.stage(torch.tensor([1]), "test")
        >>> staged.x_train[:, 0].tolist(), staged.y_test.tolist(), source.sizes("test").tolist()
        ([2.0], [1, 1], [1, 2])
    """

    def __init__(self, dataset: Dataset, train_index: list[Tensor], test_index: list[Tensor], num_classes: int,
                 seed: int = 0, val_fraction: float = 0.1, test_dataset: Dataset | None = None,
                 keys: Sequence[str] | None = None, labels: Tensor | None = None,
                 test_labels: Tensor | None = None) -> None:
        if len(train_index) != len(test_index):
            raise ValueError(f"train_index and test_index must describe the same clients; got {len(train_index)}"
                             f" and {len(test_index)}")
        self.dataset, self.test_dataset, self.keys = dataset, test_dataset, keys
        self._labels = {"data.dataset": labels, "data.test_dataset": test_labels}
        self.seed, self.val_fraction, self._num_classes = int(seed), float(val_fraction), int(num_classes)
        self._index = {"train": _joined(train_index), "test": _joined(test_index)}
        first, label = read_sample(dataset, 0, "data.dataset", keys)
        self._check_labels("data.dataset", torch.zeros(1, dtype=torch.long), label.long().reshape(1))
        self._shape, self._dtype = tuple(first.shape), first.dtype
        if test_dataset is not None:
            test_first, test_label = read_sample(test_dataset, 0, "data.test_dataset", keys)
            self._check_labels("data.test_dataset", torch.zeros(1, dtype=torch.long), test_label.long().reshape(1))
            test_shape = tuple(test_first.shape)
            if test_shape != self._shape:
                raise ConfigError(f"data.test_dataset inputs have shape {test_shape}; data.dataset's are {self._shape}")
        total = self._index["train"][1].diff().numpy()
        # np.round rounds halves to even, as Python's round does in validation_size.
        val = np.minimum(np.round(self.val_fraction * total).astype(np.int64), np.maximum(total - 1, 0))
        self._sizes = {"train": torch.from_numpy(total - val), "val": torch.from_numpy(val),
                       "test": self._index["test"][1].diff()}
        if bool((self._sizes["train"] <= 0).any()):  # as FederatedData refuses it in the eager path
            empty = int((self._sizes["train"] <= 0).nonzero()[0])
            raise ValueError(f"client {empty} has no training sample; every client needs at least one")

    @property
    def num_clients(self) -> int:
        return len(self._index["train"][1]) - 1

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self._shape

    def client_indices(self, client: int) -> dict[str, Tensor]:
        """Client ``client``'s sample indices of every split (``val`` only with a validation split)."""
        parts = {}
        for split, (flat, offsets) in self._index.items():
            parts[split] = flat[int(offsets[client]):int(offsets[client + 1])]
        if self.has_validation:
            kept, moved = client_validation_split(len(parts["train"]), self.val_fraction, self.seed, client)
            parts["train"], parts["val"] = parts["train"][kept], parts["train"][moved]
        return parts

    def _read(self, split: str, index: Tensor) -> tuple[Tensor, Tensor]:
        """``dataset[i]`` for every ``i`` of ``index``, stacked as the eager path stacks them."""
        on_test = split == "test" and self.test_dataset is not None
        dataset, field = (self.test_dataset, "data.test_dataset") if on_test else (self.dataset, "data.dataset")
        xs, ys = [], []
        for i in index.tolist():
            x, y = read_sample(dataset, i, field, self.keys)
            if tuple(x.shape) != self._shape:
                raise ConfigError(f"{field}[{i}] returned an input of shape {tuple(x.shape)}; data.dataset[0]'s is"
                                  f" {self._shape} (all inputs must have one shape)")
            xs.append(x)
            ys.append(y)
        if not xs:
            return torch.zeros((0, *self._shape), dtype=self._dtype), torch.zeros(0, dtype=torch.long)
        y = torch.stack(ys).long()
        self._check_labels(field, index, y)
        return torch.stack(xs), y

    def _check_labels(self, field: str, index: Tensor, y: Tensor) -> None:
        """One line when the items' labels ``y`` are not the labels the partition dealt ``index`` by."""
        dealt = self._labels[field]
        if dealt is not None and not torch.equal(y, dealt[index]):
            # labels()/targets that disagree with the items would silently give a partition of other labels.
            at = int((y != dealt[index]).nonzero()[0])
            raise ConfigError(f"{field}[{int(index[at])}] returned label {int(y[at])} but its labels()/targets say"
                              f" {int(dealt[index][at])}: they must be the labels __getitem__ returns")

    def stage(self, client_ids: Tensor | list[int], split: str = "train", device: torch.device | str | None = None
              ) -> FederatedData:
        """Read the samples of ``client_ids`` (in that order) as a federation (see ``ClientData.stage``)."""
        ids = checked_stage_ids(client_ids, split, self.num_clients, self.has_validation).tolist()
        wanted = staged_splits(split)
        parts: dict[str, list[Tensor]] = {s: [] for s in wanted}
        for client in ids:
            own = self.client_indices(client)
            for s in wanted:
                parts[s].append(own[s])
        joined = {s: (*self._read(s, _joined(p)[0]), offsets_from_sizes([len(i) for i in p]))
                  for s, p in parts.items()}
        empty = (*self._read("test", torch.zeros(0, dtype=torch.long)), torch.zeros(len(ids) + 1, dtype=torch.long))
        return assemble_staged(joined, empty, self._num_classes, device)

    def digest(self) -> str:
        """A SHA-256 of the index arrays, the options and the Datasets' classes and lengths (the resume check).

        The Datasets' contents are not hashed (that would read every sample): a Dataset whose samples
        changed under the same class, length and labels' partition passes the check.
        """
        digest = hashlib.sha256()
        described = [(type(d).__module__, type(d).__qualname__, len(d)) if d is not None else None
                     for d in (self.dataset, self.test_dataset)]
        digest.update(repr((described, self.keys, self.seed, self.val_fraction, self._num_classes)).encode())
        for flat, offsets in self._index.values():
            for tensor in (flat, offsets):
                digest.update(tensor.contiguous().numpy().tobytes())
        return digest.hexdigest()
