"""IID partition: a uniformly random split into equal-ish clients (docs/algorithms.md, Data)."""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fl.datamodules.partitions.base import Partition

__all__ = ["IID"]


class IID(Partition):
    """Random split into ``num_clients`` parts whose sizes differ by at most one (labels ignored).

    The samples are permuted once and cut into consecutive blocks (``torch.tensor_split``), so the
    first ``n mod num_clients`` clients get one sample more.

    Raises:
        ConfigError: From :meth:`validate`, if ``num_clients`` is outside ``[1, n]``.

    Example:
        >>> parts = IID()(torch.zeros(10, dtype=torch.long), 3, torch.Generator().manual_seed(0))
        >>> [len(p) for p in parts]
        [4, 3, 3]

    Example (YAML)::

        partition: {class_path: lightning_fl.datamodules.partitions.IID}
    """

    def split(self, labels: Tensor, num_clients: int, generator: torch.Generator) -> list[Tensor]:
        perm = torch.randperm(len(labels), generator=generator)
        return [chunk.sort().values for chunk in torch.tensor_split(perm, num_clients)]
