"""The seeded train/test split inside one client (docs/algorithms.md, Data: 80/20 per client, as FedFa)."""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fl.faults.validation import check_test_fraction

__all__ = ["split_train_test"]


def split_train_test(indices: Tensor, test_fraction: float, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random train/test split of one client's indices.

    ``round(test_fraction * n)`` indices go to the test split, but never all of them: a client keeps at
    least one training sample (so a 1-sample client keeps it in train, and a small client may have an
    empty test split).

    Args:
        indices: 1-D tensor of the client's sample indices.
        test_fraction: Fraction in ``[0, 1)`` for the test split.
        generator: Source of randomness.

    Returns:
        ``(train_idx, test_idx)``, each sorted ascending.

    Raises:
        ConfigError: If ``test_fraction`` is outside ``[0, 1)``.

    Example:
        >>> train, test = split_train_test(torch.arange(10), 0.2, torch.Generator().manual_seed(0))
        >>> len(train), len(test)
        (8, 2)
    """
    check_test_fraction(test_fraction)
    indices = torch.as_tensor(indices, dtype=torch.long).flatten()
    n = indices.numel()
    n_test = min(int(round(test_fraction * n)), max(n - 1, 0))
    perm = indices[torch.randperm(n, generator=generator)]
    return perm[n_test:].sort().values, perm[:n_test].sort().values
