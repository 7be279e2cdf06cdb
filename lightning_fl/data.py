"""Client data stored as a few contiguous tensors with per-client offsets.

Every client's train (and test) samples are one slice of a shared tensor, so the client engines
index batches without a per-client ``DataLoader``, the whole federation moves to the training device
with one ``.to()``, and evaluation of all clients runs as a few large batches whose results are
split back per client with the offsets.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor


def offsets_from_sizes(sizes: list[int] | Tensor) -> Tensor:
    """Turn per-client sizes into ``N + 1`` cumulative offsets (``offsets[k]:offsets[k+1]`` is client k)."""
    sizes = torch.as_tensor(sizes, dtype=torch.long)
    return torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])


@dataclass
class FederatedData:
    """All clients' train and test splits.

    Args:
        x_train: Train inputs of every client, concatenated along dim 0.
        y_train: Train labels (``long``), aligned with ``x_train``.
        train_offsets: ``N + 1`` offsets; client ``k`` owns rows ``train_offsets[k]:train_offsets[k+1]``.
        x_test: Test inputs, concatenated the same way.
        y_test: Test labels.
        test_offsets: ``N + 1`` offsets into the test tensors.
        num_classes: Number of label classes.

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

    def __post_init__(self) -> None:
        for split, x, y, off in (
            ("train", self.x_train, self.y_train, self.train_offsets),
            ("test", self.x_test, self.y_test, self.test_offsets),
        ):
            if len(x) != len(y) or int(off[-1]) != len(y) or int(off[0]) != 0:
                raise ValueError(f"{split} offsets must run from 0 to {len(y)} samples; got {off[0]}..{off[-1]}")
        if len(self.train_offsets) != len(self.test_offsets):
            raise ValueError("train_offsets and test_offsets must describe the same number of clients")
        if bool((self.train_sizes() <= 0).any()):
            empty = int((self.train_sizes() <= 0).nonzero()[0])
            raise ValueError(f"client {empty} has no training sample; every client needs at least one")

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

    def client_train(self, k: int) -> tuple[Tensor, Tensor]:
        lo, hi = int(self.train_offsets[k]), int(self.train_offsets[k + 1])
        return self.x_train[lo:hi], self.y_train[lo:hi]

    def client_test(self, k: int) -> tuple[Tensor, Tensor]:
        lo, hi = int(self.test_offsets[k]), int(self.test_offsets[k + 1])
        return self.x_test[lo:hi], self.y_test[lo:hi]

    def label_histograms(self, split: str = "train") -> Tensor:
        """``(N, num_classes)`` label counts per client (``long``)."""
        y, off = (self.y_train, self.train_offsets) if split == "train" else (self.y_test, self.test_offsets)
        client_of_sample = torch.repeat_interleave(torch.arange(self.num_clients, device=y.device), off.diff())
        flat = client_of_sample * self.num_classes + y.long()
        return torch.bincount(flat, minlength=self.num_clients * self.num_classes).view(self.num_clients, -1)

    def to(self, device: torch.device | str) -> FederatedData:
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in moved.items():
            if isinstance(value, Tensor) and not name.endswith("offsets"):
                moved[name] = value.to(device)
        return FederatedData(**moved)
