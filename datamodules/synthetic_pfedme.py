"""The pFedMe authors' Synthetic(alpha, beta) generator and their 90/10 split (docs/algorithms.md, Data).

pFedMe (T. Dinh et al., NeurIPS 2020) ships its own copy of the FedProx generator
(``data/Synthetic/generate_synthetic_05_05.py`` of CharlieDinh/pFedMe at caf24b1). The distributions
are FedProx's:

* ``u_k ~ N(0, alpha)`` (the mean of both ``W_k`` and ``b_k``), ``B_k ~ N(0, beta)`` (standard deviations);
* ``v_k ~ N(B_k, 1)^d``; ``Sigma = diag(j^-1.2)``, ``j = 1..d``;
* ``W_k ~ N(u_k, 1)^(d x C)``, ``b_k ~ N(u_k, 1)^C``; ``x ~ N(v_k, Sigma)``;
* ``y = argmax(softmax(x W_k + b_k))``, computed as ``argmax(x W_k + b_k)``: the softmax is monotone,
  and the script's unshifted ``exp`` would only overflow for logits above 709 (at seed 0 the largest
  is about 90).

What differs from FedProx's script (and from :func:`~lightning_fl.datamodules.synthetic.generate_synthetic`):

* ``n_k = (int(lognormal(4, 2)) + 50) * 5``: five times FedProx's sizes; 100 users instead of 30;
* the script seeds numpy's global generator (``np.random.seed(0)``); FedProx's copy does not;
* the IID branch (``iid=True``) sets ``v_k = B_k`` (one constant per user; 0 for ``beta = 0``) and
  still draws, then discards, every user's ``W_k, b_k``; FedFa's reading in this project uses ``v_k = 0``.

Randomness: one legacy ``np.random.RandomState(seed)`` drawn in the script's order: the sizes, ``u``,
``B``, every ``v_k`` (non-IID), the shared ``W, b`` (IID), then user by user ``W_k``, ``b_k`` and the
user's ``x`` by ``multivariate_normal``. So ``seed = 0`` replays the authors' samples, and a seed
``s`` replays their script run after ``np.random.seed(s)``. A cap (``max_samples_per_client``) keeps a
prefix of each user's full draw, so it changes nothing else.

The split (:func:`pfedme_train_test_split`): the authors shuffle each user's samples and keep the first
``int(0.9 n)`` for training. Their shuffle is Python's unseeded ``random.shuffle``, which cannot be
replayed; here the shuffle is a seeded ``torch.randperm`` (the caller's generator).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from lightning_fl.faults.validation import ConfigError, check_non_negative, check_positive, check_test_fraction

__all__ = ["generate_synthetic_pfedme", "pfedme_sizes", "pfedme_train_test_split"]


def pfedme_sizes(rng: np.random.RandomState, num_clients: int) -> np.ndarray:
    """``n_k = (int(lognormal(4, 2)) + 50) * 5``: the first draw of the authors' script."""
    return (rng.lognormal(4, 2, num_clients).astype(np.int64) + 50) * 5


def generate_synthetic_pfedme(
    alpha: float = 0.5,
    beta: float = 0.5,
    iid: bool = False,
    num_clients: int = 100,
    num_features: int = 60,
    num_classes: int = 10,
    seed: int = 0,
    max_samples_per_client: int | None = None,
) -> list[tuple[Tensor, Tensor]]:
    """The pFedMe authors' Synthetic(alpha, beta) users (docs/algorithms.md, Data).

    Args:
        alpha: Standard deviation of ``u_k`` (0.5 in pFedMe's experiments).
        beta: Standard deviation of ``B_k`` (0.5).
        iid: The script's IID branch: one shared ``W, b ~ N(0, 1)`` and ``v_k = B_k``.
        num_clients: Number of users (100 in pFedMe).
        num_features: Input dimension ``d`` (60).
        num_classes: Number of classes ``C`` (10).
        seed: Seed of the legacy ``RandomState`` (0 replays the authors' data), in ``[0, 2**32)``.
        max_samples_per_client: Optional cap on ``n_k`` (a prefix of the full draw); ``None`` keeps the formula.

    Returns:
        One ``(x, y)`` pair per user: ``x`` float32 ``(n_k, d)``, ``y`` int64 ``(n_k,)`` in ``[0, C)``.

    Raises:
        ConfigError: If a size is not a positive integer, ``alpha``/``beta`` is negative, the cap is
            below 1 or ``seed`` is outside ``[0, 2**32)``.

    Example:
        >>> users = generate_synthetic_pfedme(num_clients=3, seed=0, max_samples_per_client=1000)
        >>> [len(y) for _, y in users], users[0][0].shape[1]
        ([1000, 855, 1000], 60)
    """
    for name, value in (("num_clients", num_clients), ("num_features", num_features), ("num_classes", num_classes)):
        check_positive(name, value, integer=True)
    check_non_negative("alpha", alpha)
    check_non_negative("beta", beta)
    if max_samples_per_client is not None:
        check_positive("max_samples_per_client", max_samples_per_client, integer=True)
    if not 0 <= seed < 2**32:
        raise ConfigError(f"seed must be in [0, 2**32) for the pFedMe generator (numpy's legacy RandomState); got {seed}")

    rng = np.random.RandomState(seed)
    sizes = pfedme_sizes(rng, num_clients)
    mean_w = rng.normal(0, alpha, num_clients)  # u_k; the script uses it for b_k too
    big_b = rng.normal(0, beta, num_clients)  # B_k
    cov_x = np.diag(np.power(np.arange(1, num_features + 1, dtype=np.float64), -1.2))
    if iid:
        mean_x = np.ones((num_clients, num_features)) * big_b[:, None]
        w_shared = rng.normal(0, 1, (num_features, num_classes))
        b_shared = rng.normal(0, 1, num_classes)
    else:
        mean_x = np.stack([rng.normal(big_b[k], 1, num_features) for k in range(num_clients)])

    users = []
    for k in range(num_clients):
        w = rng.normal(mean_w[k], 1, (num_features, num_classes))
        b = rng.normal(mean_w[k], 1, num_classes)
        if iid:
            w, b = w_shared, b_shared
        x = rng.multivariate_normal(mean_x[k], cov_x, int(sizes[k]))
        if max_samples_per_client is not None:
            x = x[:max_samples_per_client]
        y = np.argmax(x @ w + b, axis=1)
        users.append((torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.int64))))
    return users


def pfedme_train_test_split(indices: Tensor, test_fraction: float, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """The authors' split of one user: shuffle, then the first ``int((1 - test_fraction) n)`` train.

    ``test_fraction = 0.1`` is their ``train_len = int(0.9 * n)``; the test split takes the rest, so it
    rounds up (``n = 265``: 238 train, 27 test). A user keeps at least one training sample.

    Args:
        indices: 1-D tensor of the user's sample indices.
        test_fraction: In ``[0, 1)``.
        generator: Source of the shuffle.

    Returns:
        ``(train_idx, test_idx)``, each sorted ascending.

    Raises:
        ConfigError: If ``test_fraction`` is outside ``[0, 1)``.

    Example:
        >>> train, test = pfedme_train_test_split(torch.arange(265), 0.1, torch.Generator().manual_seed(0))
        >>> len(train), len(test)
        (238, 27)
    """
    check_test_fraction(test_fraction)
    indices = torch.as_tensor(indices, dtype=torch.long).flatten()
    n = indices.numel()
    n_train = min(max(int((1 - test_fraction) * n), 1), n)
    perm = indices[torch.randperm(n, generator=generator)]
    return perm[:n_train].sort().values, perm[n_train:].sort().values
