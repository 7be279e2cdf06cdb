"""``#C = k`` label skew by sort-and-partition shards (docs/algorithms.md, Data, McMahan et al. 2017)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from lightning_fl.datamodules.partitions.base import FIELD, Partition, as_labels
from lightning_fl.datamodules.partitions.numpy_rng import numpy_rng
from lightning_fl.datamodules.partitions.owners import groups_by_owner
from lightning_fl.faults.validation import ConfigError, check_positive, check_range

__all__ = ["Shards"]


class Shards(Partition):
    """Every client gets ``classes_per_client`` single-class shards; ``1`` is DWFed's 1-class case.

    The samples are grouped by label (random order inside a class) and cut into
    ``S = num_clients * classes_per_client`` shards; every client receives ``classes_per_client``
    random shards. Two deliberate refinements over a plain equal-width cut of the sorted vector:

    * Shard boundaries are aligned with class boundaries, so every shard holds one class even when
      class counts are unequal (MNIST, digits). Each class gets shards in proportion to its size
      (D'Hondt rule, at least one each), so shard sizes are as equal as possible. Hence
      ``classes_per_client=1`` always gives every client exactly one class.
    * For ``k >= 2`` the random deal is repaired by swaps so that a client's shards come from ``k``
      *different* classes (the paper's "2 partitions from 2 classes"). This is impossible when a class
      holds more than ``num_clients`` shards (a very large class); such clients keep fewer than ``k``
      distinct classes.

    Args:
        classes_per_client: Shards (= classes) per client, between 1 and the number of classes present.

    Raises:
        ConfigError: If ``classes_per_client`` is not an integer ``>= 1`` (here) or exceeds the classes
            present, or ``num_clients * classes_per_client`` is smaller than the number of classes
            present (a class would have no shard, so single-class shards could not cover the data) or
            larger than ``n`` (a shard would be empty) (:meth:`validate`).

    Example:
        >>> labels = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
        >>> parts = Shards(classes_per_client=1)(labels, 3, torch.Generator().manual_seed(0))
        >>> sorted(tuple(labels[p].unique().tolist()) for p in parts)
        [(0,), (1,), (2,)]

    Example (YAML)::

        partition:
          class_path: lightning_fl.datamodules.partitions.Shards
          init_args: {classes_per_client: 2}
    """

    def __init__(self, classes_per_client: int = 2) -> None:
        check_positive(f"{FIELD}.classes_per_client", classes_per_client, integer=True)
        self.classes_per_client = classes_per_client

    def validate(self, labels: Tensor, num_clients: int) -> None:
        super().validate(labels, num_clients)
        n, num_present = len(labels), len(np.unique(as_labels(labels)))
        check_range(f"{FIELD}.classes_per_client", self.classes_per_client, 1, num_present,
                    what="the classes present in the labels")
        num_shards = num_clients * self.classes_per_client
        if not num_present <= num_shards <= n:
            raise ConfigError(
                f"num_clients * {FIELD}.classes_per_client must be between {num_present} (the classes present)"
                f" and {n} (the samples) for Shards; got {num_clients} * {self.classes_per_client} = {num_shards}"
            )

    def split(self, labels: Tensor, num_clients: int, generator: torch.Generator) -> list[Tensor]:
        y = as_labels(labels)
        classes, counts = np.unique(y, return_counts=True)
        num_present = len(classes)
        k = self.classes_per_client
        num_shards = num_clients * k
        rng = numpy_rng(generator)

        # D'Hondt: give the next shard to the class whose shards are currently largest.
        shards_per_class = np.ones(num_present, dtype=np.int64)
        for _ in range(num_shards - num_present):
            shards_per_class[np.argmax(counts / shards_per_class)] += 1

        shard_members: list[np.ndarray] = []
        shard_class: list[int] = []
        for c, s in zip(classes, shards_per_class):
            for chunk in np.array_split(rng.permutation(np.flatnonzero(y == c)), s):
                shard_members.append(chunk)
                shard_class.append(int(c))

        deal = rng.permutation(num_shards).reshape(num_clients, k).tolist()
        if k > 1:
            _repair_duplicate_classes(deal, shard_class, rng)

        owner = np.empty(len(y), dtype=np.int64)
        for client, shards in enumerate(deal):
            for s in shards:
                owner[shard_members[s]] = client
        return groups_by_owner(owner, num_clients)


def _repair_duplicate_classes(deal: list[list[int]], shard_class: list[int], rng: np.random.Generator) -> None:
    """Swap shards between clients (in place) until no client holds two shards of one class.

    Only swaps that remove a duplicate without creating one are accepted, so the number of duplicates
    never rises; the search is bounded (best effort when no duplicate-free deal exists).
    """
    num_clients, k = len(deal), len(deal[0])

    def duplicate_slot(client: int) -> int | None:
        seen: set[int] = set()
        for slot, s in enumerate(deal[client]):
            if shard_class[s] in seen:
                return slot
            seen.add(shard_class[s])
        return None

    bad = [c for c in range(num_clients) if duplicate_slot(c) is not None]
    budget = 50 * num_clients * k
    while bad and budget > 0 and num_clients > 1:
        budget -= 1
        a = bad[int(rng.integers(len(bad)))]
        i = duplicate_slot(a)
        if i is None:  # fixed as the partner of an earlier swap
            bad.remove(a)
            continue
        b, j = int(rng.integers(num_clients)), int(rng.integers(k))
        if b == a:
            continue
        ca, cb = shard_class[deal[a][i]], shard_class[deal[b][j]]
        others_a = {shard_class[s] for t, s in enumerate(deal[a]) if t != i}
        others_b = {shard_class[s] for t, s in enumerate(deal[b]) if t != j}
        if cb in others_a or ca in others_b:
            continue
        deal[a][i], deal[b][j] = deal[b][j], deal[a][i]
        if duplicate_slot(a) is None:
            bad.remove(a)
        if b in bad and duplicate_slot(b) is None:
            bad.remove(b)
