"""Synthetic(alpha, beta) drawn client by client, so a round produces only its cohort's samples (docs/scaling.md).

FedProx's generator (:mod:`lightning_fl.datamodules.synthetic`) draws every user's model ``(v_k, W_k, b_k)``
from one stream in order, so client ``k`` cannot be produced without the ``k - 1`` before it. The
``per_client`` generator draws the same distribution with every random choice keyed by the client:

* ``n_k = int(lognormal(4, 2)) + 50`` for all users from ``np.random.default_rng([seed, 0])`` (``N``
  numbers, no sample drawn), capped by ``max_samples_per_client``;
* client ``k``'s ``u_k``, ``B_k``, ``v_k``, ``W_k``, ``b_k`` and then its ``n_k`` inputs from
  ``np.random.default_rng([seed, 1, k])`` (IID: one shared ``W, b`` from ``[seed, 2]`` and ``v_k = 0``);
* its train/test split from ``generator_for(seed, "synthetic_per_client", "train_test_split", k)`` and its
  validation split from :func:`~lightning_fl.state.data.client_validation_split`.

So client ``k``'s samples are a function of ``(seed, k)`` alone: :class:`LazySyntheticData` stages any
cohort in ``O(cohort)``, and its :meth:`~LazySyntheticData.stage` of every client is the eager federation.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch import Tensor

from lightning_fl.datamodules.split import split_train_test
from lightning_fl.faults.validation import check_non_negative, check_positive, check_test_fraction, check_val_fraction
from lightning_fl.state.data import (
    FederatedData,
    assemble_staged,
    checked_stage_ids,
    client_validation_split,
    offsets_from_sizes,
    SizedClientData,
    staged_splits,
)
from lightning_fl.state.seeding import generator_for

__all__ = ["LazySyntheticData", "split_sizes", "synthetic_client", "synthetic_sizes"]


def synthetic_sizes(num_clients: int, seed: int, max_samples_per_client: int | None = None) -> np.ndarray:
    """``n_k = int(lognormal(4, 2)) + 50`` of every client (int64), from the size stream ``[seed, 0]`` only.

    Example:
        >>> sizes = synthetic_sizes(1000, seed=0, max_samples_per_client=300)
        >>> int(sizes.min()) >= 50, int(sizes.max()) <= 300
        (True, True)
    """
    sizes = np.random.default_rng([seed, 0]).lognormal(4, 2, num_clients).astype(np.int64) + 50
    return sizes if max_samples_per_client is None else np.minimum(sizes, max_samples_per_client)


def split_sizes(sizes: np.ndarray, test_fraction: float, val_fraction: float) -> dict[str, np.ndarray]:
    """Train, validation and test sizes of clients of ``sizes`` samples, without drawing the splits.

    The same counts as :func:`~lightning_fl.datamodules.split.split_train_test` (``round(f n)``, at most
    ``n - 1``) followed by :func:`~lightning_fl.state.data.validation_size` on the training part.

    Example:
        >>> {k: v.tolist() for k, v in split_sizes(np.array([50, 3, 1]), 0.2, 0.1).items()}
        {'train': [36, 2, 1], 'val': [4, 0, 0], 'test': [10, 1, 0]}
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    # np.round rounds halves to even, as Python's round does in split_train_test and validation_size.
    test = np.minimum(np.round(test_fraction * sizes).astype(np.int64), np.maximum(sizes - 1, 0))
    train = sizes - test
    val = np.minimum(np.round(val_fraction * train).astype(np.int64), np.maximum(train - 1, 0))
    return {"train": train - val, "val": val, "test": test}


def synthetic_client(alpha: float, beta: float, iid: bool, seed: int, client: int, num_samples: int,
                     num_features: int = 60, num_classes: int = 10) -> tuple[Tensor, Tensor]:
    """Client ``client``'s ``(x, y)`` of Synthetic(alpha, beta) (or IID), a function of ``(seed, client)`` alone.

    Returns:
        ``x`` float32 ``(num_samples, num_features)``, ``y`` int64 ``(num_samples,)`` in ``[0, num_classes)``.

    Example:
        >>> x, y = synthetic_client(1.0, 1.0, False, seed=0, client=7, num_samples=5)
        >>> x.shape, bool(torch.equal(y, synthetic_client(1.0, 1.0, False, 0, 7, 5)[1]))
        (torch.Size([5, 60]), True)
    """
    std_x = np.power(np.arange(1, num_features + 1, dtype=np.float64), -1.2) ** 0.5  # sqrt(diag(Sigma))
    rng = np.random.default_rng([seed, 1, client])
    if iid:
        shared = np.random.default_rng([seed, 2])
        w, b = shared.normal(0, 1, (num_features, num_classes)), shared.normal(0, 1, num_classes)
        mean_x = np.zeros(num_features)
    else:
        mean_w, big_b = rng.normal(0, alpha), rng.normal(0, beta)  # u_k, B_k
        mean_x = rng.normal(big_b, 1, num_features)
        w, b = rng.normal(mean_w, 1, (num_features, num_classes)), rng.normal(mean_w, 1, num_classes)
    # Sigma is diagonal, so N(v_k, Sigma) is v_k + sqrt(diag(Sigma)) * standard normal.
    x = mean_x + rng.standard_normal((num_samples, num_features)) * std_x
    y = np.argmax(x @ w + b, axis=1)
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.int64))


class LazySyntheticData(SizedClientData):
    """The ``per_client`` Synthetic federation as a :class:`~lightning_fl.state.data.ClientData` source.

    Holds the ``N`` sizes (8 bytes per client and split) and nothing else: :meth:`stage` generates the
    asked clients' samples and splits them.

    Args:
        alpha: Standard deviation of ``u_k``. Ignored when ``iid``.
        beta: Standard deviation of ``B_k``. Ignored when ``iid``.
        iid: One shared ``W, b`` and ``v_k = 0``.
        num_clients: ``N``.
        seed: Seed of every stream.
        test_fraction: Fraction of each client's samples held out for testing.
        val_fraction: Fraction of each client's training samples moved to validation (``0``: none).
        max_samples_per_client: Cap on ``n_k`` (``None``: the exact formula).
        num_features: Input dimension ``d``.
        num_classes: Number of classes ``C``.

    Example:
        >>> source = LazySyntheticData(1.0, 1.0, False, num_clients=10**6, seed=0, max_samples_per_client=100)
        >>> staged = source.stage(torch.tensor([999_999, 3]), "test")
        >>> staged.num_clients, staged.train_sizes().tolist() == source.sizes("train")[[999_999, 3]].tolist()
        (2, True)
    """

    def __init__(self, alpha: float, beta: float, iid: bool, num_clients: int, seed: int = 0,
                 test_fraction: float = 0.2, val_fraction: float = 0.1, max_samples_per_client: int | None = None,
                 num_features: int = 60, num_classes: int = 10) -> None:
        for name, value in (("num_clients", num_clients), ("num_features", num_features), ("num_classes", num_classes)):
            check_positive(name, value, integer=True)
        check_non_negative("alpha", alpha)
        check_non_negative("beta", beta)
        check_test_fraction(test_fraction)
        check_val_fraction(val_fraction)
        self.alpha, self.beta, self.iid, self.seed = float(alpha), float(beta), bool(iid), int(seed)
        self.test_fraction, self.val_fraction = float(test_fraction), float(val_fraction)
        self.max_samples_per_client = max_samples_per_client
        self._num_clients, self._num_features, self._num_classes = num_clients, num_features, num_classes
        self._total = synthetic_sizes(num_clients, seed, max_samples_per_client)
        self._sizes = {k: torch.from_numpy(v) for k, v in
                       split_sizes(self._total, self.test_fraction, self.val_fraction).items()}

    @property
    def num_clients(self) -> int:
        return self._num_clients

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self._num_features,)

    def client_splits(self, client: int) -> dict[str, tuple[Tensor, Tensor]]:
        """Client ``client``'s ``(x, y)`` of every split (``val`` only with a validation split)."""
        x, y = synthetic_client(self.alpha, self.beta, self.iid, self.seed, client, int(self._total[client]),
                                self._num_features, self._num_classes)
        keys = (self.seed, "synthetic_per_client", "train_test_split", client)
        train, test = split_train_test(torch.arange(len(y)), self.test_fraction, generator_for(*keys))
        parts = {"test": test}
        if self.has_validation:
            kept, moved = client_validation_split(len(train), self.val_fraction, self.seed, client)
            train, parts["val"] = train[kept], train[moved]
        parts["train"] = train
        # Gathered in numpy: torch's indexing of small tensors waits on its thread pool when the CPU is busy.
        x_np, y_np = x.numpy(), y.numpy()
        return {split: (torch.from_numpy(x_np[index.numpy()]), torch.from_numpy(y_np[index.numpy()]))
                for split, index in parts.items()}

    def stage(self, client_ids: Tensor | list[int], split: str = "train", device: torch.device | str | None = None
              ) -> FederatedData:
        """Generate the samples of ``client_ids`` (in that order) as a federation (see ``ClientData.stage``)."""
        ids = checked_stage_ids(client_ids, split, self._num_clients, self.has_validation).tolist()
        wanted = staged_splits(split)
        parts: dict[str, list[tuple[Tensor, Tensor]]] = {s: [] for s in wanted}
        for client in ids:
            splits = self.client_splits(client)
            for s in wanted:
                parts[s].append(splits[s])
        joined = {s: (torch.cat([x for x, _ in p]) if p else torch.zeros(0, self._num_features),
                      torch.cat([y for _, y in p]) if p else torch.zeros(0, dtype=torch.long),
                      offsets_from_sizes([len(y) for _, y in p])) for s, p in parts.items()}
        empty = (torch.zeros(0, self._num_features), torch.zeros(0, dtype=torch.long), torch.zeros(len(ids) + 1,
                                                                                                   dtype=torch.long))
        return assemble_staged(joined, empty, self._num_classes, device)

    def digest(self) -> str:
        """A SHA-256 of what determines every sample (the resume check compares it, as it hashes eager data)."""
        described = (self.alpha, self.beta, self.iid, self.seed, self.test_fraction, self.val_fraction,
                     self.max_samples_per_client, self._num_clients, self._num_features, self._num_classes)
        return hashlib.sha256(f"per_client synthetic {described}".encode()).hexdigest()

