"""Per-client Dirichlet: each client draws its own class mix and holds a fixed number of samples (docs/algorithms.md, Data).

Hsu et al. 2019 ("Measuring the effects of non-identical data distribution"), as used by IGFL
(section 5.1, ``c ~ Dir(rho q)``) and Tempo (section 4, 600 samples per client).
"""

from __future__ import annotations

import numpy as np
import torch
from lightning_fl.datamodules.largest_remainder import (
    largest_remainder,
    rows_largest_remainder,
)
from lightning_fl.datamodules.partitions.base import FIELD, Partition, as_labels
from pytorch_lightning.utilities import rank_zero_warn
from torch import Tensor

from lightning_fl.faults.validation import ConfigError, check_choice, check_positive
from lightning_fl.state.seeding import derive_seed

__all__ = ["PRIORS", "PerClientDirichlet", "allocate_counts"]

#: What ``p`` in ``q_k ~ Dir(rho p)`` is: the pool's label frequencies or equal weights.
PRIORS = ("population", "uniform")


class PerClientDirichlet(Partition):
    """Client ``k`` draws class proportions ``q_k ~ Dir(rho p)`` and holds ``size`` samples.

    ``p`` is the label distribution of the pool (``prior: population``, Hsu et al.) or uniform over
    the classes present (``prior: uniform``: IGFL's "prior probability, assuming a uniform
    distribution"; the two agree on balanced data). ``rho`` is the *total* concentration: every class
    gets ``rho p_c``, so with ``C`` balanced classes Tempo's symmetric ``Dir(alpha, ..., alpha)`` is
    ``rho = alpha * C`` (``alpha = 0.1`` over Fashion-MNIST's 10 classes is ``rho = 1``). Small ``rho``
    gives each client few classes; large ``rho`` approaches IID.

    Client ``k`` wants ``largest_remainder(q_k, size)`` samples of each class (Hamilton rounding, so
    its counts sum to ``size`` exactly and each is ``q_kc * size`` rounded up or down). ``q_k`` comes
    from a stream of its own (``derive_seed(s, "proportions", k)``, ``s`` the first draw of the
    partition's generator), so it depends on the seed and ``k`` only, not on the other clients.

    * ``replacement: false`` (default): clients do not share samples; ``size * num_clients`` must not
      exceed the pool. When the clients' wishes for a class exceed its samples, the class is shared in
      proportion to the wishes and each client's shortfall is asked again from the classes that still
      have samples, in proportion to its own ``q_k`` over them (over the remaining pool if ``q_k``
      puts no weight there), until every client holds ``size`` (:func:`allocate_counts`). This is
      the redraw rule of common Hsu-style samplers (a draw of an exhausted class is drawn again),
      without their dependence on the order of clients. Those samples no longer follow ``q_k``; a
      warning gives their share. Which samples of a class go where is a seeded shuffle per class.
      Samples no client needs are left out.
    * ``replacement: true``: every client samples from the whole pool on its own (a stream of
      ``(seed, k)``): each class without replacement inside the client (with replacement only if it
      wants more of a class than the pool has), but clients may share samples. Client ``k``'s data
      then depends on the seed and ``k`` alone. Tempo needs this: 200 clients x 600 samples exceed
      Fashion-MNIST's 60,000 training images. A shared sample can sit in one client's training split
      and another's validation split, so ``val/*`` is optimistic; pooled datamodules refuse a
      per-client test split (``test_fraction > 0``) with it; the official test set is unaffected.

    Args:
        rho: Total Dirichlet concentration, ``> 0``.
        size: Samples per client (``>= 1``); ``None`` is ``n // num_clients`` (the whole pool, as Hsu
            et al.'s 100 x 500 CIFAR-10 clients).
        prior: ``"population"`` or ``"uniform"``.
        replacement: Let clients share samples (see above).

    Raises:
        ConfigError: If an option is out of range (here) or, without replacement, ``size *
            num_clients`` exceeds the samples (:meth:`validate`).

    Example:
        >>> labels = torch.arange(400) % 4
        >>> parts = PerClientDirichlet(rho=0.5, size=20)(labels, 5, torch.Generator().manual_seed(0))
        >>> [len(p) for p in parts]
        [20, 20, 20, 20, 20]

    Example (YAML)::

        partition:
          class_path: lightning_fl.datamodules.partitions.PerClientDirichlet
          init_args: {rho: 1.0, size: 600, replacement: true}
    """

    def __init__(self, rho: float, size: int | None = 600, prior: str = "population",
                 replacement: bool = False) -> None:
        check_positive(f"{FIELD}.rho", rho)
        if size is not None:
            check_positive(f"{FIELD}.size", size, integer=True)
        check_choice(f"{FIELD}.prior", prior, PRIORS)
        if not isinstance(replacement, bool):
            raise ConfigError(f"{FIELD}.replacement must be true or false; got {replacement!r}")
        self.rho = rho
        self.size = size
        self.prior = prior
        self.replacement = replacement

    @property
    def shares_samples(self) -> bool:
        return self.replacement

    def client_size(self, num_samples: int, num_clients: int) -> int:
        """Samples per client: ``size``, or ``num_samples // num_clients`` for ``size: null``."""
        return self.size if self.size is not None else num_samples // num_clients

    def validate(self, labels: Tensor, num_clients: int) -> None:
        super().validate(labels, num_clients)
        n = len(labels)
        size = self.client_size(n, num_clients)
        if not self.replacement and size * num_clients > n:
            raise ConfigError(
                f"{FIELD}.size * num_clients must be at most {n} (the samples) without replacement; got {size} *"
                f" {num_clients} = {size * num_clients}; lower {FIELD}.size or set {FIELD}.replacement: true"
            )

    def proportions(self, labels: Tensor, num_clients: int, generator: torch.Generator) -> np.ndarray:
        """``(num_clients, C)`` class proportions ``q_k`` over the classes present (ascending), advancing ``generator``."""
        counts = np.unique(as_labels(labels), return_counts=True)[1]
        prior = counts / counts.sum() if self.prior == "population" else np.full(len(counts), 1.0 / len(counts))
        stream = int(torch.randint(0, 2**62, (1,), generator=generator))
        return np.stack([np.random.default_rng(derive_seed(stream, "proportions", k)).dirichlet(self.rho * prior)
                         for k in range(num_clients)])

    def split(self, labels: Tensor, num_clients: int, generator: torch.Generator) -> list[Tensor]:
        y = as_labels(labels)
        classes, supply = np.unique(y, return_counts=True)
        members = [np.flatnonzero(y == c) for c in classes]
        size = self.client_size(len(y), num_clients)
        q = self.proportions(labels, num_clients, generator)
        stream = int(torch.randint(0, 2**62, (1,), generator=generator))  # the samples' stream
        wishes = rows_largest_remainder(q, np.full(num_clients, size))
        if self.replacement:
            return [_sample_client(members, wishes[k], np.random.default_rng(derive_seed(stream, "samples", k)))
                    for k in range(num_clients)]
        counts = allocate_counts(q, np.full(num_clients, size), supply)
        moved = int(np.maximum(wishes - counts, 0).sum())
        if moved:
            rank_zero_warn(
                f"PerClientDirichlet: classes ran out without replacement; {moved} of {size * num_clients} samples"
                f" ({moved / (size * num_clients):.1%}) come from other classes than the clients' q_k asked for;"
                f" lower {FIELD}.size or set {FIELD}.replacement: true to keep every client's mix"
            )
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for c, pool in enumerate(members):
            pool = np.random.default_rng(derive_seed(stream, "class", int(classes[c]))).permutation(pool)
            cuts = np.cumsum(counts[:, c])
            for k, chunk in enumerate(np.split(pool[: cuts[-1]], cuts[:-1])):
                parts[k].append(chunk)
        return [torch.from_numpy(np.sort(np.concatenate(chunks))) for chunks in parts]


def _sample_client(members: list[np.ndarray], counts: np.ndarray, rng: np.random.Generator) -> Tensor:
    """``counts[c]`` samples of each class ``c`` from ``members[c]`` (with replacement only beyond its size)."""
    chosen = [rng.choice(pool, size=int(m), replace=int(m) > len(pool)) for pool, m in zip(members, counts) if m]
    return torch.from_numpy(np.sort(np.concatenate(chosen)))


def allocate_counts(weights: np.ndarray, need: np.ndarray, supply: np.ndarray) -> np.ndarray:
    """Per-client class counts from class weights, when classes can run out (no sample used twice).

    Every round, client ``k`` asks for its remaining need spread over the classes that still have
    samples in proportion to ``weights[k]`` (Hamilton rounding; over the remaining supply if its
    weights there are all zero); a class asked for more than it has is shared in proportion to the
    asks (Hamilton rounding again), and what a client did not get is asked again next round. Each
    round fills every need or empties a class, so it ends after at most ``C + 1`` rounds.

    Args:
        weights: ``(N, C)`` non-negative class weights per client (``q_k``).
        need: ``(N,)`` samples each client must receive.
        supply: ``(C,)`` samples available per class; ``sum(need) <= sum(supply)``.

    Returns:
        ``(N, C)`` ``int64`` counts: row ``k`` sums to ``need[k]``, column ``c`` to at most ``supply[c]``.

    Example:
        >>> allocate_counts(np.array([[1.0, 0.0], [0.5, 0.5]]), np.array([4, 4]), np.array([3, 10])).tolist()
        [[2, 2], [1, 3]]
    """
    weights = np.asarray(weights, dtype=np.float64)
    need = np.array(need, dtype=np.int64)
    supply = np.array(supply, dtype=np.int64)
    if need.sum() > supply.sum():
        raise ValueError(f"need {int(need.sum())} samples but only {int(supply.sum())} are available")
    counts = np.zeros(weights.shape, dtype=np.int64)
    while need.any():
        available = supply > 0
        wish = weights * available
        stuck = wish.sum(axis=1) == 0  # q_k puts no weight on what is left: take the remaining pool's mix
        wish[stuck] = supply * available
        ask = rows_largest_remainder(wish, need)
        for c in np.flatnonzero(ask.sum(axis=0) > supply):
            ask[:, c] = largest_remainder(ask[:, c], int(supply[c]))  # never above the ask: shares < 1
        counts += ask
        need -= ask.sum(axis=1)
        supply -= ask.sum(axis=0)
    return counts
