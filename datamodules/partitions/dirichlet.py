"""Dirichlet label skew: each class's samples shared among clients by ``Dir(alpha)`` (docs/algorithms.md, Data)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from lightning_fl.datamodules.partitions.base import FIELD, Partition, as_labels, check_min_size
from lightning_fl.datamodules.partitions.numpy_rng import numpy_rng
from lightning_fl.datamodules.partitions.owners import groups_by_owner
from lightning_fl.faults.validation import ConfigError, check_positive

__all__ = ["Dirichlet"]


class Dirichlet(Partition):
    """Dirichlet label skew (the NIID-Bench "``p_k ~ Dir(alpha)``" scheme).

    For every class ``c``, proportions ``q ~ Dir(alpha, ..., alpha)`` over the clients are drawn and
    the class's shuffled samples are cut at ``floor(cumsum(q) * n_c)``. Small ``alpha`` concentrates
    each class on few clients; large ``alpha`` approaches an IID split. The whole draw is repeated
    until every client has at least ``min_size`` samples. Unlike NIID-Bench, proportions are not
    zeroed for clients that already hold more than the average, so the label skew is exactly
    Dirichlet; all samples are always used. ``cap_at_mean=True`` restores NIID-Bench's rule (classes
    are dealt in turn and a client already holding ``n / num_clients`` samples gets no share of the
    next class), which many published setups use and which makes small ``alpha`` feasible for many
    clients (e.g. ``alpha = 0.1`` over 200 clients).

    Args:
        alpha: Dirichlet concentration, ``> 0``; smaller is more skewed.
        min_size: Minimum number of samples per client (``>= 1``), before any train/test split.
        cap_at_mean: Zero the share of clients already above the mean size (NIID-Bench).
        max_tries: How many complete draws to attempt before giving up.

    Raises:
        ConfigError: If an option is out of range (here), ``min_size * num_clients`` exceeds the
            samples (:meth:`validate`), or no draw in ``max_tries`` met ``min_size`` (the message says
            which knob to turn).

    Example:
        >>> labels = torch.arange(100) % 10
        >>> parts = Dirichlet(alpha=1.0, min_size=5)(labels, 4, torch.Generator().manual_seed(0))
        >>> sum(len(p) for p in parts)
        100

    Example (YAML)::

        partition:
          class_path: lightning_fl.datamodules.partitions.Dirichlet
          init_args: {alpha: 0.1, min_size: 2, cap_at_mean: true}
    """

    def __init__(self, alpha: float, min_size: int = 10, cap_at_mean: bool = False, max_tries: int = 100) -> None:
        check_positive(f"{FIELD}.alpha", alpha)
        check_positive(f"{FIELD}.min_size", min_size, integer=True)
        if not isinstance(cap_at_mean, bool):
            raise ConfigError(f"{FIELD}.cap_at_mean must be true or false; got {cap_at_mean!r}")
        check_positive(f"{FIELD}.max_tries", max_tries, integer=True)
        self.alpha = alpha
        self.min_size = min_size
        self.cap_at_mean = cap_at_mean
        self.max_tries = max_tries

    def validate(self, labels: Tensor, num_clients: int) -> None:
        super().validate(labels, num_clients)
        check_min_size(self.min_size, num_clients, len(labels))

    def split(self, labels: Tensor, num_clients: int, generator: torch.Generator) -> list[Tensor]:
        y = as_labels(labels)
        n = len(y)
        rng = numpy_rng(generator)
        class_members = [np.flatnonzero(y == c) for c in np.unique(y)]
        owner = np.empty(n, dtype=np.int64)
        for _ in range(self.max_tries):
            held = np.zeros(num_clients, dtype=np.int64)
            for members in class_members:
                members = rng.permutation(members)
                share = rng.dirichlet(np.full(num_clients, float(self.alpha)))
                if self.cap_at_mean:
                    share = share * (held < n / num_clients)
                    share = share / share.sum()
                cuts = (np.cumsum(share) * len(members)).astype(np.int64)
                # Position j of the shuffled class goes to the client whose cut range contains j.
                owner[members] = np.searchsorted(cuts[:-1], np.arange(len(members)), side="right")
                held += np.bincount(owner[members], minlength=num_clients)
            if np.bincount(owner, minlength=num_clients).min() >= self.min_size:
                return groups_by_owner(owner, num_clients)
        raise ConfigError(
            f"{FIELD} Dirichlet found no split giving all {num_clients} clients >= {self.min_size} samples"
            f" ({FIELD}.min_size) in {self.max_tries} tries with alpha={self.alpha} and {n} samples; raise"
            f" {FIELD}.alpha, or lower {FIELD}.min_size or num_clients"
        )
