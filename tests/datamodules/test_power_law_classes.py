"""PowerLawClasses: ``#C = k`` consecutive classes per client with power-law sizes (FedProx's MNIST, FedFa)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lightning_fl.datamodules.partitions import PowerLawClasses

from lightning_fl.state.seeding import derive_seed


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def histograms(labels: torch.Tensor, parts: list[torch.Tensor], num_classes: int) -> np.ndarray:
    return np.stack([np.bincount(labels[p].numpy(), minlength=num_classes) for p in parts])


def hamilton(weights: list[float], total: int) -> list[int]:
    """Reference rounding written here: floors, then +1 to the largest remainders (first index on ties)."""
    raw = [w / sum(weights) * total for w in weights]
    out = [int(np.floor(r)) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: -(raw[i] - out[i]))[: total - sum(out)]:
        out[i] += 1
    return out


def test_equal_weights_by_hand():
    # sigma ~ 0: all weights ~1. 4 classes x 20, 4 clients x 2 consecutive classes: client u holds u and
    # u + 1 mod 4, each class has 2 holders: 5 each first, the other 10 shared equally -> 10 + 10.
    labels = torch.arange(4).repeat_interleave(20)
    parts = PowerLawClasses(classes_per_client=2, sigma=1e-9)(labels, 4, gen())
    assert histograms(labels, parts, 4).tolist() == [[10, 10, 0, 0], [0, 10, 10, 0], [0, 0, 10, 10], [10, 0, 0, 10]]
    assert torch.equal(torch.cat(parts).sort().values, torch.arange(80))


@pytest.mark.parametrize("distribution", ["lognormal", "power_law"])
def test_counts_follow_each_clients_weights(distribution):
    # Reference: client u's weights are default_rng(derive_seed(s, "weights", u)).lognormal(0, 2, k) (or
    # pareto(1.5, k) + 1), s the first draw of the partition's generator; class c's holders (clients
    # u with c = u + j mod C, ascending) get min_per_class plus a Hamilton share of the rest by weight.
    counts = [60, 45, 80, 30, 50]
    labels = torch.arange(5).repeat_interleave(torch.tensor(counts))
    num_clients, k, m = 12, 2, 3
    s = int(torch.randint(0, 2**62, (1,), generator=gen(4)))
    rngs = [np.random.default_rng(derive_seed(s, "weights", u)) for u in range(num_clients)]
    weights = [r.lognormal(0.0, 2.0, k) if distribution == "lognormal" else r.pareto(1.5, k) + 1.0 for r in rngs]
    expected = np.zeros((num_clients, 5), dtype=np.int64)
    for c in range(5):
        holders = [(u, j) for u in range(num_clients) for j in range(k) if (u + j) % 5 == c]
        shares = hamilton([weights[u][j] for u, j in holders], counts[c] - m * len(holders))
        for (u, _), share in zip(holders, shares):
            expected[u, c] = m + share
    parts = PowerLawClasses(classes_per_client=k, distribution=distribution, min_per_class=m)(labels, num_clients, gen(4))
    assert histograms(labels, parts, 5).tolist() == expected.tolist()
    assert torch.equal(torch.cat(parts).sort().values, torch.arange(sum(counts)))


def test_fedprox_mnist_shape():
    # FedProx's MNIST: 1,000 clients, 2 digits each, 5 of each first, the rest by lognormal(0, 2) weights.
    # 10 classes x 7,000: every client has exactly its digits u, u + 1 mod 10, every digit 200 holders,
    # sizes >= 10 summing to 70,000 (mean 70). Lognormal(0, 2) weights (median 1, mean e^2 ~ 7.4) make a
    # typical client far smaller than the mean: a median slot gets ~ 5 + 6,000 / (200 * 7.4) ~ 9 (clients
    # 23-27 at seeds 0-3) and the largest ~ 2,000-4,000; equal sizes would have median 70 and max 70.
    labels = torch.arange(70_000) % 10
    parts = PowerLawClasses()(labels, 1000, gen())
    hist = histograms(labels, parts, 10)
    owned = hist > 0
    assert (owned.sum(axis=1) == 2).all()
    assert all(owned[u, u % 10] and owned[u, (u + 1) % 10] for u in range(1000))
    assert owned.sum(axis=0).tolist() == [200] * 10 and hist[owned].min() >= 5
    sizes = hist.sum(axis=1)
    assert sizes.sum() == 70_000 and np.median(sizes) < 35 and sizes.max() > 500


def test_same_seed_same_partition():
    labels = torch.arange(300) % 6
    a = PowerLawClasses(classes_per_client=3)(labels, 10, gen(1))
    b = PowerLawClasses(classes_per_client=3)(labels, 10, gen(1))
    c = PowerLawClasses(classes_per_client=3)(labels, 10, gen(2))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))


@pytest.mark.parametrize(
    ("make", "num_clients", "message"),
    [(lambda: PowerLawClasses(classes_per_client=0), 4, "partition.classes_per_client must be an integer >= 1; got 0"),
     (lambda: PowerLawClasses(distribution="zipf"), 4, "partition.distribution must be one of lognormal, power_law"),
     (lambda: PowerLawClasses(sigma=0.0), 4, "partition.sigma must be a finite number > 0"),
     (lambda: PowerLawClasses(min_per_class=0), 4, "partition.min_per_class must be an integer >= 1"),
     (lambda: PowerLawClasses(classes_per_client=5), 4,
      "partition.classes_per_client must be between 1 and 4 (the classes present in the labels); got 5"),
     (lambda: PowerLawClasses(classes_per_client=1), 3,
      ("num_clients + partition.classes_per_client - 1 must be at least 4 (the classes present) for"
       " PowerLawClasses, so that every class has a client; got 3 + 1 - 1")),
     # class 3 has 10 samples for 2 holders (clients 2 and 3 of 4): at most 5 each
     (lambda: PowerLawClasses(min_per_class=6), 4,
      "partition.min_per_class must be at most 5 (class 3 has 10 samples for 2 clients); got 6")],
)
def test_errors_are_one_line_and_name_the_field(make, num_clients, message):
    labels = torch.arange(4).repeat_interleave(torch.tensor([30, 30, 30, 10]))
    with pytest.raises(ValueError) as err:
        make()(labels, num_clients, gen())
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
