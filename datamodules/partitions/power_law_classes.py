"""``#C = k`` classes per client with power-law sizes: FedProx's MNIST generator (docs/algorithms.md, Data).

FedProx (Li et al. 2020) built its MNIST federation, which q-FFL and FedFa reuse ("1000 devices,
2 digits each, the number of samples follows the power law"), with ``data/mnist/generate_niid.py``.
Our reading of that script:

* user ``u`` holds the two consecutive digits ``u mod 10`` and ``(u + 1) mod 10``;
* every user first gets 5 samples of each of its digits (10,000 samples in all);
* the rest of digit ``l`` (``len(l) - 1000``) is shared among its 200 (user, slot) holders in
  proportion to weights ``~ lognormal(0, 2)``: the "power law" is a lognormal law, drawn per
  (digit, user // 10, slot), i.e. once per holder;
* shares are truncated with ``int()``, so about 1,000 samples are dropped (69,035 of 70,000 kept,
  Table 1 of FedFa); each user is then split 90/10 (FedFa: 80/20) at random.

:class:`PowerLawClasses` does the same for any pool, ``k`` and number of clients, with two changes:
shares are rounded by largest remainder so every sample is used, and the weights can also be Pareto.
"""

from __future__ import annotations

import numpy as np
import torch
from lightning_fl.datamodules.largest_remainder import largest_remainder
from lightning_fl.datamodules.partitions.base import FIELD, Partition, as_labels
from lightning_fl.datamodules.partitions.owners import groups_by_owner
from lightning_fl.datamodules.partitions.quantity import QUANTITY_DISTRIBUTIONS
from torch import Tensor

from lightning_fl.faults.validation import (
    ConfigError,
    check_choice,
    check_positive,
    check_range,
)
from lightning_fl.state.seeding import derive_seed

__all__ = ["PowerLawClasses"]


class PowerLawClasses(Partition):
    """Every client holds ``classes_per_client`` consecutive classes, with heavy-tailed sizes (FedProx's MNIST).

    With the ``C`` classes present in ascending order, client ``u`` holds classes ``(u + j) mod C``
    for ``j < classes_per_client`` (its slots); a class's holders are the (client, slot) pairs that
    name it. Every holder first gets ``min_per_class`` samples of its class; the rest of the class is
    shared among its holders in proportion to their weights (largest-remainder rounding, so every
    sample is used once). Client ``u``'s slot weights are drawn from a stream of its own
    (``derive_seed(s, "weights", u)``, ``s`` the first draw of the partition's generator):
    ``lognormal(0, sigma)`` (FedProx: ``sigma = 2``) or, for ``"power_law"``, Pareto with tail index
    ``power`` plus 1 (as :class:`~lightning_fl.datamodules.partitions.Quantity`). Which samples of a
    class go to which holder is a seeded shuffle per class. So every client has exactly
    ``classes_per_client`` classes and at least ``classes_per_client * min_per_class`` samples, and
    sizes are skewed by both the weights and the class sizes.

    Args:
        classes_per_client: Classes per client, between 1 and the number of classes present.
        distribution: ``"lognormal"`` or ``"power_law"``.
        sigma: Lognormal shape, ``> 0``; used with ``lognormal``.
        power: Pareto tail index, ``> 0``; used with ``power_law``.
        min_per_class: Samples every client gets of each of its classes first (``>= 1``).

    Raises:
        ConfigError: If an option is out of range (here), or (:meth:`validate`) ``classes_per_client``
            exceeds the classes present, some class has no holder (``num_clients + classes_per_client
            - 1 < C``), or a class has fewer than ``min_per_class`` samples per holder.

    Example:
        >>> labels = torch.arange(400) % 4
        >>> parts = PowerLawClasses(classes_per_client=2)(labels, 8, torch.Generator().manual_seed(0))
        >>> [sorted(set(labels[p].tolist())) for p in parts[:4]]
        [[0, 1], [1, 2], [2, 3], [0, 3]]

    Example (YAML)::

        partition:
          class_path: lightning_fl.datamodules.partitions.PowerLawClasses
          init_args: {classes_per_client: 2, sigma: 2.0, min_per_class: 5}
    """

    def __init__(self, classes_per_client: int = 2, distribution: str = "lognormal", sigma: float = 2.0,
                 power: float = 1.5, min_per_class: int = 5) -> None:
        check_positive(f"{FIELD}.classes_per_client", classes_per_client, integer=True)
        check_choice(f"{FIELD}.distribution", distribution, QUANTITY_DISTRIBUTIONS)
        check_positive(f"{FIELD}.sigma", sigma)
        check_positive(f"{FIELD}.power", power)
        check_positive(f"{FIELD}.min_per_class", min_per_class, integer=True)
        self.classes_per_client = classes_per_client
        self.distribution = distribution
        self.sigma = sigma
        self.power = power
        self.min_per_class = min_per_class

    def validate(self, labels: Tensor, num_clients: int) -> None:
        super().validate(labels, num_clients)
        classes, counts = np.unique(as_labels(labels), return_counts=True)
        k, num_classes = self.classes_per_client, len(classes)
        check_range(f"{FIELD}.classes_per_client", k, 1, num_classes, what="the classes present in the labels")
        if num_clients + k - 1 < num_classes:
            raise ConfigError(
                f"num_clients + {FIELD}.classes_per_client - 1 must be at least {num_classes} (the classes present)"
                f" for PowerLawClasses, so that every class has a client; got {num_clients} + {k} - 1"
            )
        holders = self._holders(num_clients, num_classes)
        per_holder = counts // np.maximum(holders, 1)
        worst = int(np.argmin(per_holder))
        if self.min_per_class > per_holder[worst]:
            raise ConfigError(
                f"{FIELD}.min_per_class must be at most {per_holder[worst]} (class {classes[worst]} has"
                f" {counts[worst]} samples for {holders[worst]} clients); got {self.min_per_class}"
            )

    def _holders(self, num_clients: int, num_classes: int) -> np.ndarray:
        """``(C,)`` how many clients hold each class."""
        slots = (np.arange(num_clients)[:, None] + np.arange(self.classes_per_client)) % num_classes
        return np.bincount(slots.ravel(), minlength=num_classes)

    def weights(self, num_clients: int, generator: torch.Generator) -> np.ndarray:
        """``(num_clients, classes_per_client)`` slot weights, client ``u``'s from its own stream; advances ``generator``."""
        stream = int(torch.randint(0, 2**62, (1,), generator=generator))
        rows = []
        for u in range(num_clients):
            rng = np.random.default_rng(derive_seed(stream, "weights", u))
            if self.distribution == "lognormal":
                rows.append(rng.lognormal(0.0, float(self.sigma), self.classes_per_client))
            else:
                rows.append(rng.pareto(float(self.power), self.classes_per_client) + 1.0)
        return np.stack(rows)

    def split(self, labels: Tensor, num_clients: int, generator: torch.Generator) -> list[Tensor]:
        y = as_labels(labels)
        classes = np.unique(y)
        num_classes = len(classes)
        slot_weights = self.weights(num_clients, generator)
        stream = int(torch.randint(0, 2**62, (1,), generator=generator))  # the samples' stream
        slot_class = (np.arange(num_clients)[:, None] + np.arange(self.classes_per_client)) % num_classes
        owner = np.empty(len(y), dtype=np.int64)
        for c, label in enumerate(classes):
            holder_client, holder_slot = np.nonzero(slot_class == c)  # clients in ascending order
            members = np.random.default_rng(derive_seed(stream, "class", int(label))).permutation(
                np.flatnonzero(y == label))
            extra = len(members) - len(holder_client) * self.min_per_class
            sizes = self.min_per_class + largest_remainder(slot_weights[holder_client, holder_slot], extra)
            owner[members] = np.repeat(holder_client, sizes)
        return groups_by_owner(owner, num_clients)
