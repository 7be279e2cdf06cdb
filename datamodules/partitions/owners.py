"""Per-client index lists from a per-sample owner array (the partitions' common last step)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["groups_by_owner"]


def groups_by_owner(owner: np.ndarray, num_clients: int) -> list[Tensor]:
    """Split sample ids ``0..n-1`` by ``owner[i]`` into sorted per-client ``LongTensor`` s.

    Example:
        >>> [p.tolist() for p in groups_by_owner(np.array([1, 0, 1, 2]), 4)]
        [[1], [0, 2], [3], []]
    """
    order = np.argsort(owner, kind="stable")  # stable: indices stay ascending inside each client
    sizes = np.bincount(owner, minlength=num_clients)
    return [torch.from_numpy(chunk.copy()) for chunk in np.split(order, np.cumsum(sizes)[:-1])]
