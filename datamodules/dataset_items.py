"""Reading one item of a map-style Dataset as ``(x, y)`` tensors (docs/datasets.md, Your own Dataset).

The eager :func:`~lightning_fl.datamodules.dataset.stack_dataset` and the lazy
:class:`~lightning_fl.datamodules.lazy_dataset.LazyDatasetData` read items with these functions, so the
two paths convert (and refuse) items alike: the staged tensors are bitwise the stacked ones.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from lightning_fl.faults.validation import ConfigError

__all__ = ["dataset_length", "read_sample"]


def _describe(value: Any) -> str:
    """What an item is, for the error line: ``Tensor(float32, (3,))``, ``str``, ``(Tensor, str)``."""
    if isinstance(value, Tensor):
        return f"Tensor({str(value.dtype).removeprefix('torch.')}, {tuple(value.shape)})"
    if isinstance(value, tuple | list):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k!r}: {_describe(v)}" for k, v in value.items()) + "}"
    return type(value).__name__


def _as_tensor(value: Any, field: str, index: int, item: Any) -> Tensor:
    """``value`` (a tensor, numpy array or number) as a tensor; anything else is a one-line ConfigError."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray) and value.dtype != object:
        return torch.from_numpy(value)
    if isinstance(value, numbers.Number) and not isinstance(value, bool | complex):
        return torch.tensor(value)
    raise ConfigError(f"{field}[{index}] returned {_describe(item)}: __getitem__ must return (x, y) of tensors or"
                      " numbers (e.g. add a transform that turns images into tensors)")


def _pair(item: Any, keys: Sequence[str] | None, field: str, index: int) -> tuple[Any, Any]:
    """The ``(x, y)`` of one item: a 2-tuple/list, or a mapping read at ``keys``."""
    if isinstance(item, Mapping):
        if keys is None or not all(k in item for k in keys):
            raise ConfigError(f"{field}[{index}] returned a mapping with keys {sorted(map(str, item))}: name the"
                              f" input and label keys as data.keys: [<input>, <label>]; got keys: {keys!r}")
        return item[keys[0]], item[keys[1]]
    if isinstance(item, tuple | list) and len(item) == 2:
        return item[0], item[1]
    raise ConfigError(f"{field}[{index}] returned {_describe(item)}: __getitem__ must return (x, y) of tensors or"
                      " numbers, or a mapping read at data.keys")


def dataset_length(dataset: Dataset, field: str = "data.dataset") -> int:
    """``len(dataset)`` of a non-empty map-style Dataset; anything else is a one-line ConfigError naming ``field``."""
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        raise ConfigError(f"{field} must be a map-style torch.utils.data.Dataset (with __len__ and __getitem__);"
                          f" got {type(dataset).__name__}")
    n = len(dataset)
    if n == 0:
        raise ConfigError(f"{field} is empty (len 0); a federation needs at least one sample")
    return n


def read_sample(dataset: Dataset, index: int, field: str = "data.dataset", keys: Sequence[str] | None = None
                ) -> tuple[Tensor, Tensor]:
    """``dataset[index]`` as ``(x, y)`` tensors, ``y`` a 0-d integer label (what :func:`stack_dataset` stacks).

    Raises:
        ConfigError: For an item that is not ``(x, y)`` of tensors or numbers, a label that is not an
            integer scalar, or an ``IndexError``/``KeyError`` from ``__getitem__`` (one line naming ``field``).

    Example:
        >>> x, y = read_sample([(torch.ones(2), 3)], 0)
        >>> x.tolist(), y.dtype, y.shape
        ([1.0, 1.0], torch.int64, torch.Size([]))
    """
    try:
        item = dataset[index]
    except (IndexError, KeyError) as err:
        raise ConfigError(f"{field} has len {len(dataset)} but {field}[{index}] raised {type(err).__name__}:"
                          f" {err}") from None
    x, y = _pair(item, keys, field, index)
    x, y = _as_tensor(x, field, index, item), _as_tensor(y, field, index, item)
    if y.numel() != 1 or y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise ConfigError(f"{field}[{index}] returned label {_describe(y)}: labels must be integer scalars"
                          " (class indices; partitions deal samples by label)")
    return x, y.reshape(())
