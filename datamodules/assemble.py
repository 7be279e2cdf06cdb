"""Assemble a federation from a pooled data set and per-client index lists (docs/algorithms.md, Data)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from lightning_fl.datamodules.split import split_train_test
from lightning_fl.faults.validation import ConfigError, check_test_fraction
from lightning_fl.state.data import FederatedData, offsets_from_sizes

__all__ = ["build_from_pooled", "check_indices"]


def build_from_pooled(
    x: Tensor,
    y: Tensor,
    client_indices: list[Tensor],
    num_classes: int,
    test_fraction: float,
    generator: torch.Generator,
    split: Callable[[Tensor, float, torch.Generator], tuple[Tensor, Tensor]] = split_train_test,
) -> FederatedData:
    """Assemble :class:`FederatedData` from a pooled dataset and per-client index lists (docs/algorithms.md, Data).

    Each client's indices are split into train and test with ``split`` (by default
    :func:`~lightning_fl.datamodules.split.split_train_test`; clients in order, all drawing from
    ``generator``); the splits are concatenated client by client.

    Args:
        x: ``(n, ...)`` pooled inputs.
        y: ``(n,)`` pooled integer labels in ``[0, num_classes)``.
        client_indices: One 1-D index tensor per client (indices into ``x``/``y``).
        num_classes: Number of label classes.
        test_fraction: Per-client test fraction in ``[0, 1)``.
        generator: Source of randomness for the splits.
        split: ``(indices, test_fraction, generator) -> (train_idx, test_idx)`` for one client.

    Returns:
        The federation, labels as ``long``.

    Raises:
        ConfigError: If ``x`` and ``y`` differ in length, a label is outside ``[0, num_classes)``, a client
            holds an index outside ``[0, n)`` or ``test_fraction`` is outside ``[0, 1)``.
        ValueError: If a client ends up with no training sample (from :class:`FederatedData`).

    Example:
        >>> x, y = torch.randn(10, 3), torch.arange(10) % 2
        >>> data = build_from_pooled(x, y, [torch.arange(5), torch.arange(5, 10)], 2, 0.2, torch.Generator())
        >>> data.train_sizes().tolist(), data.test_sizes().tolist()
        ([4, 4], [1, 1])
    """
    check_test_fraction(test_fraction)
    if len(x) != len(y):
        raise ConfigError(f"x and y must have the same number of samples; got {len(x)} and {len(y)}")
    y = torch.as_tensor(y).long()
    if len(y) and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise ConfigError(f"labels must lie in [0, {num_classes}) (num_classes); got {int(y.min())}..{int(y.max())}")
    check_indices(client_indices, len(y))
    splits = [split(idx, test_fraction, generator) for idx in client_indices]
    train = torch.cat([tr for tr, _ in splits]) if splits else torch.zeros(0, dtype=torch.long)
    test = torch.cat([te for _, te in splits]) if splits else torch.zeros(0, dtype=torch.long)
    return FederatedData(
        x_train=x[train],
        y_train=y[train],
        train_offsets=offsets_from_sizes([len(tr) for tr, _ in splits]),
        x_test=x[test],
        y_test=y[test],
        test_offsets=offsets_from_sizes([len(te) for _, te in splits]),
        num_classes=int(num_classes),
    )


def check_indices(client_indices: list[Tensor], num_samples: int) -> None:
    """Raise a one-line ``ConfigError`` naming ``partition`` if a client holds an index outside ``[0, num_samples)``.

    A negative index would silently wrap around in tensor indexing, so a user's partition that
    miscounts is stopped here, before anything is drawn or trained.

    Example:
        >>> check_indices([torch.tensor([0, 4])], 4)
        Traceback (most recent call last):
        ...
        lightning_fl.faults.validation.ConfigError: partition gave client 0 index 4, outside the dataset's 4 samples [0, 4)
    """
    for k, idx in enumerate(client_indices):
        if len(idx):
            low, high = int(idx.min()), int(idx.max())
            if low < 0 or high >= num_samples:
                raise ConfigError(f"partition gave client {k} index {low if low < 0 else high}, outside the"
                                  f" dataset's {num_samples} samples [0, {num_samples})")
