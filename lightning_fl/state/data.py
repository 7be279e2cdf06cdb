"""Client data stored as a few contiguous tensors with per-client offsets.

Every client's train (and test) samples are one slice of a shared tensor, so the client engines
index batches without a per-client ``DataLoader``, the whole federation moves to the training device
with one ``.to()``, and evaluation of all clients runs as a few large batches whose results are
split back per client with the offsets.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from lightning_fl.state.seeding import generator_for


#: The splits a federation holds (``val`` only with a validation split).
SPLITS = ("train", "val", "test")


def offsets_from_sizes(sizes: list[int] | Tensor) -> Tensor:
    """Turn per-client sizes into ``N + 1`` cumulative offsets (``offsets[k]:offsets[k+1]`` is client k)."""
    sizes = torch.as_tensor(sizes, dtype=torch.long)
    return torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])


@runtime_checkable
class ClientData(Protocol):
    """A federation whose clients' samples are produced when a round needs them (docs/scaling.md, Many clients).

    :class:`FederatedData` is the eager implementation (every sample in memory, :meth:`stage` slices);
    a lazy source (e.g. :class:`~lightning_fl.datamodules.lazy_synthetic.LazySyntheticData`) produces
    only the staged clients' samples, so memory grows with the cohort, not with ``N``.
    """

    @property
    def num_clients(self) -> int: ...

    @property
    def num_classes(self) -> int: ...

    @property
    def input_shape(self) -> tuple[int, ...]: ...

    @property
    def has_validation(self) -> bool: ...

    def sizes(self, split: str = "train") -> Tensor:
        """``(N,)`` ``long`` samples per client of ``split``, known without producing any sample."""
        ...

    def stage(self, client_ids: Tensor, split: str = "train", device: torch.device | str | None = None
              ) -> FederatedData:
        """The samples of ``client_ids`` as a federation of ``len(client_ids)`` clients, in the order given.

        Row ``i`` of the result is client ``client_ids[i]``. The result holds their training samples
        (every client of a :class:`FederatedData` has some) and, for ``split`` ``val`` or ``test``, that
        split too; the other splits are empty.
        """
        ...


@dataclass
class FederatedData:
    """All clients' train, validation and test splits.

    Args:
        x_train: Train inputs of every client, concatenated along dim 0.
        y_train: Train labels (``long``), aligned with ``x_train``.
        train_offsets: ``N + 1`` offsets; client ``k`` owns rows ``train_offsets[k]:train_offsets[k+1]``.
        x_test: Test inputs, concatenated the same way.
        y_test: Test labels.
        test_offsets: ``N + 1`` offsets into the test tensors.
        num_classes: Number of label classes; ``0`` for real-valued targets (regression), whose
            ``y`` are floats and whose label histograms are empty.
        x_val: Validation inputs, concatenated the same way; ``None`` (with ``y_val`` and
            ``val_offsets``) when the federation has no validation split (``val_fraction: 0``).
        y_val: Validation labels.
        val_offsets: ``N + 1`` offsets into the validation tensors.

    Raises:
        ValueError: If the offsets do not cover the tensors or a client has no training sample.
    """

    x_train: Tensor
    y_train: Tensor
    train_offsets: Tensor
    x_test: Tensor
    y_test: Tensor
    test_offsets: Tensor
    num_classes: int
    x_val: Tensor | None = None
    y_val: Tensor | None = None
    val_offsets: Tensor | None = None

    def __post_init__(self) -> None:
        given = [v is not None for v in (self.x_val, self.y_val, self.val_offsets)]
        if any(given) and not all(given):
            raise ValueError("x_val, y_val and val_offsets must be given together (or none of them)")
        splits = [("train", self.x_train, self.y_train, self.train_offsets),
                  ("test", self.x_test, self.y_test, self.test_offsets)]
        if self.has_validation:
            splits.append(("val", self.x_val, self.y_val, self.val_offsets))
            if len(self.val_offsets) != len(self.train_offsets):
                raise ValueError("train_offsets and val_offsets must describe the same number of clients")
        for split, x, y, off in splits:
            if len(x) != len(y) or int(off[-1]) != len(y) or int(off[0]) != 0:
                raise ValueError(f"{split} offsets must run from 0 to {len(y)} samples; got {off[0]}..{off[-1]}")
        if len(self.train_offsets) != len(self.test_offsets):
            raise ValueError("train_offsets and test_offsets must describe the same number of clients")
        if bool((self.train_sizes() <= 0).any()):
            empty = int((self.train_sizes() <= 0).nonzero()[0])
            raise ValueError(f"client {empty} has no training sample; every client needs at least one")

    @property
    def has_validation(self) -> bool:
        """Whether the clients have validation splits (``False`` with ``val_fraction: 0``)."""
        return self.val_offsets is not None

    @property
    def num_clients(self) -> int:
        return len(self.train_offsets) - 1

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    def train_sizes(self) -> Tensor:
        """``n_k`` for every client (``long`` tensor of length N)."""
        return self.train_offsets.diff()

    def test_sizes(self) -> Tensor:
        return self.test_offsets.diff()

    def val_sizes(self) -> Tensor:
        """Validation samples per client (zeros when there is no validation split)."""
        if self.val_offsets is None:
            return torch.zeros(self.num_clients, dtype=torch.long)
        return self.val_offsets.diff()

    def sizes(self, split: str = "train") -> Tensor:
        """``(N,)`` samples per client of ``split`` (the :class:`ClientData` protocol)."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}; got {split!r}")
        return {"train": self.train_sizes, "val": self.val_sizes, "test": self.test_sizes}[split]()

    def stage(self, client_ids: Tensor | list[int], split: str = "train", device: torch.device | str | None = None
              ) -> FederatedData:
        """The federation of ``client_ids`` only, in the order given, sliced from these tensors.

        See :meth:`ClientData.stage`. Row ``i`` holds exactly client ``client_ids[i]``'s samples, in the
        order this federation keeps them, so a consumer that reads a staged cohort by position sees the
        same tensors as one that reads this federation by client id.

        Example:
            >>> x = torch.arange(6.0).unsqueeze(1)
            >>> data = FederatedData(x[:4], torch.zeros(4, dtype=torch.long), offsets_from_sizes([1, 3]),
            ...                      x[4:], torch.zeros(2, dtype=torch.long), offsets_from_sizes([1, 1]), 1)
            >>> staged = data.stage([1, 0], "test")
            >>> staged.x_train.flatten().tolist(), staged.x_test.flatten().tolist(), staged.train_sizes().tolist()
            ([1.0, 2.0, 3.0, 0.0], [5.0, 4.0], [3, 1])
        """
        ids = checked_stage_ids(client_ids, split, self.num_clients, self.has_validation)
        joined = {s: _gather_clients(*self.split(s), ids) for s in staged_splits(split)}
        empty = (self.x_test[:0], self.y_test[:0], torch.zeros(len(ids) + 1, dtype=torch.long))
        return assemble_staged(joined, empty, self.num_classes, device)

    def client_train(self, k: int) -> tuple[Tensor, Tensor]:
        lo, hi = int(self.train_offsets[k]), int(self.train_offsets[k + 1])
        return self.x_train[lo:hi], self.y_train[lo:hi]

    def client_test(self, k: int) -> tuple[Tensor, Tensor]:
        lo, hi = int(self.test_offsets[k]), int(self.test_offsets[k + 1])
        return self.x_test[lo:hi], self.y_test[lo:hi]

    def client_val(self, k: int) -> tuple[Tensor, Tensor]:
        if self.val_offsets is None:
            raise ValueError("this federation has no validation split (val_fraction is 0)")
        lo, hi = int(self.val_offsets[k]), int(self.val_offsets[k + 1])
        return self.x_val[lo:hi], self.y_val[lo:hi]

    def split(self, stage: str) -> tuple[Tensor, Tensor, Tensor]:
        """``(x, y, offsets)`` of the ``"train"``, ``"val"`` or ``"test"`` split."""
        if stage == "val" and self.val_offsets is None:
            raise ValueError("this federation has no validation split (val_fraction is 0)")
        return {"train": (self.x_train, self.y_train, self.train_offsets),
                "val": (self.x_val, self.y_val, self.val_offsets),
                "test": (self.x_test, self.y_test, self.test_offsets)}[stage]

    def label_histograms(self, split: str = "train") -> Tensor:
        """``(N, num_classes)`` label counts per client (``long``) of the ``train``, ``val`` or ``test`` split.

        A federation of real-valued targets (``num_classes == 0``, e.g. regression) has no labels to
        count: its histograms are ``(N, 0)``, so the reports that read them see no classes instead of
        counting truncated floats.
        """
        _, y, off = self.split(split)
        if self.num_classes == 0:
            return torch.zeros(self.num_clients, 0, dtype=torch.long)
        # Offsets stay on the CPU (FederatedData.to); the samples may be on a GPU.
        client_of_sample = torch.repeat_interleave(torch.arange(self.num_clients), off.diff().cpu()).to(y.device)
        flat = client_of_sample * self.num_classes + y.long()
        return torch.bincount(flat, minlength=self.num_clients * self.num_classes).view(self.num_clients, -1)

    def to(self, device: torch.device | str) -> FederatedData:
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in moved.items():
            if isinstance(value, Tensor) and not name.endswith("offsets"):  # None (no validation) stays None
                moved[name] = value.to(device)
        return FederatedData(**moved)


def _gather_clients(x: Tensor, y: Tensor, offsets: Tensor, ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The rows of clients ``ids`` (in that order) of one split, and their ``len(ids) + 1`` offsets."""
    offsets = offsets.cpu()
    starts, sizes = offsets[ids], offsets.diff()[ids]
    sub = offsets_from_sizes(sizes)
    # Sample positions of every chosen client, in order: its start, plus 0 .. n_k - 1.
    index = torch.repeat_interleave(starts - sub[:-1], sizes) + torch.arange(int(sub[-1]))
    index = index.to(x.device)
    return x[index], y[index], sub


def validation_size(n: int, val_fraction: float) -> int:
    """Validation samples taken from a client with ``n`` training samples.

    ``round(val_fraction * n)`` (Python's ``round``: halves go to the even number, as in the
    train/test split), but at most ``n - 1``, so a client always keeps at least one training sample.

    Example:
        >>> validation_size(50, 0.1), validation_size(3, 0.9), validation_size(1, 0.5), validation_size(25, 0.1)
        (5, 2, 0, 2)
    """
    return min(int(round(val_fraction * n)), max(n - 1, 0))


def client_validation_split(n: int, val_fraction: float, seed: int, client: int) -> tuple[Tensor, Tensor]:
    """Positions ``(kept, moved)`` among client ``client``'s ``n`` training samples: what stays, what validates.

    The first :func:`validation_size` of a permutation drawn from ``generator_for(seed,
    "validation_split", client)`` move; both parts are sorted (the samples keep their order). A lazy
    source calls this for the clients it stages, :func:`split_validation` for every client: the same split.

    Example:
        >>> kept, moved = client_validation_split(10, 0.2, seed=0, client=3)
        >>> len(kept), len(moved), sorted(kept.tolist() + moved.tolist()) == list(range(10))
        (8, 2, True)
    """
    perm = torch.randperm(n, generator=generator_for(seed, "validation_split", client))
    n_val = validation_size(n, val_fraction)
    return perm[n_val:].sort().values, perm[:n_val].sort().values


def split_validation(data: FederatedData, val_fraction: float, seed: int) -> FederatedData:
    """Move :func:`validation_size` of every client's training samples to a validation split.

    Client ``k``'s validation samples are the first ``validation_size(n_k, val_fraction)`` of a
    permutation drawn from ``generator_for(seed, "validation_split", k)``: a function of the seed and
    the client only, never of the cohort, the engine or the number of processes. Both parts keep the
    samples' original order; the test split is not touched. ``val_fraction == 0`` (or data that
    already has a validation split) returns ``data`` itself.

    Example:
        >>> x = torch.arange(12.0).unsqueeze(1)
        >>> data = FederatedData(x[:10], torch.zeros(10, dtype=torch.long), offsets_from_sizes([8, 2]),
        ...                      x[10:], torch.zeros(2, dtype=torch.long), offsets_from_sizes([1, 1]), 1)
        >>> split = split_validation(data, 0.25, seed=0)
        >>> split.train_sizes().tolist(), split.val_sizes().tolist(), split.test_sizes().tolist()
        ([6, 2], [2, 0], [1, 1])
    """
    if val_fraction == 0 or data.has_validation:
        return data
    train_idx, val_idx = [], []
    for k, (lo, hi) in enumerate(zip(data.train_offsets[:-1].tolist(), data.train_offsets[1:].tolist())):
        kept, moved = client_validation_split(hi - lo, val_fraction, seed, k)
        val_idx.append(moved + lo)
        train_idx.append(kept + lo)
    train, val = torch.cat(train_idx), torch.cat(val_idx)
    device = data.x_train.device
    return FederatedData(
        x_train=data.x_train[train.to(device)], y_train=data.y_train[train.to(device)],
        train_offsets=offsets_from_sizes([len(i) for i in train_idx]),
        x_test=data.x_test, y_test=data.y_test, test_offsets=data.test_offsets, num_classes=data.num_classes,
        x_val=data.x_train[val.to(device)], y_val=data.y_train[val.to(device)],
        val_offsets=offsets_from_sizes([len(i) for i in val_idx]),
    )


def checked_stage_ids(client_ids: Tensor | list[int], split: str, num_clients: int, has_validation: bool) -> Tensor:
    """The ``(K,)`` ``long`` CPU ids of a :meth:`ClientData.stage` call, after the checks every source makes.

    Raises:
        ValueError: For a ``split`` outside :data:`SPLITS`, ``val`` without a validation split, or an id
            outside ``[0, num_clients)``.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}; got {split!r}")
    if split == "val" and not has_validation:
        raise ValueError("this federation has no validation split (val_fraction is 0)")
    ids = torch.as_tensor(client_ids, dtype=torch.long).flatten().cpu()
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= num_clients):
        raise ValueError(f"client ids must lie in [0, {num_clients}); got {int(ids.min())}..{int(ids.max())}")
    return ids


def staged_splits(split: str) -> tuple[str, ...]:
    """The splits a staged federation holds: ``train`` always (the engines train on it), and ``split``."""
    return ("train", split) if split != "train" else ("train",)


def assemble_staged(joined: dict[str, tuple[Tensor, Tensor, Tensor]], empty: tuple[Tensor, Tensor, Tensor],
                    num_classes: int, device: torch.device | str | None = None) -> FederatedData:
    """A staged federation from its splits' ``(x, y, offsets)``; ``empty`` stands in for a test split not staged."""
    staged = FederatedData(*joined["train"], *joined.get("test", empty), num_classes,
                           *joined.get("val", (None, None, None)))
    return staged if device is None else staged.to(device)


class SizedClientData:
    """What the lazy :class:`ClientData` sources share: their per-split ``(N,)`` sizes held in memory (``_sizes``),
    ``_num_classes`` and ``val_fraction``, set by the subclass; the samples themselves come from its ``stage``."""

    _num_classes: int
    _sizes: dict[str, Tensor]
    val_fraction: float

    @property
    def num_classes(self) -> int:
        return self._num_classes

    @property
    def has_validation(self) -> bool:
        return self.val_fraction > 0

    def sizes(self, split: str = "train") -> Tensor:
        """``(N,)`` ``long`` samples per client of ``split``, known without producing a sample."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}; got {split!r}")
        return self._sizes[split]
