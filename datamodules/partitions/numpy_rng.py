"""A numpy generator drawn from a torch generator, for the partitions' numpy-only distributions."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["numpy_rng"]


def numpy_rng(generator: torch.Generator) -> np.random.Generator:
    """A numpy generator seeded from (and advancing) ``generator``.

    numpy supplies what torch lacks for seeded partitioning: Dirichlet draws that stay finite for
    tiny ``alpha`` (numpy switches to a beta stick-breaking sampler below 0.1), lognormal and Pareto
    variates. Drawing the seed from the torch generator keeps a single source of randomness.

    Example:
        >>> a = numpy_rng(torch.Generator().manual_seed(0)).integers(1000)
        >>> b = numpy_rng(torch.Generator().manual_seed(0)).integers(1000)
        >>> bool(a == b)
        True
    """
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    return np.random.default_rng(seed)
