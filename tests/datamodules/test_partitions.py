"""Tests for lightning_fl.datamodules.partitions and the train/test split (SPEC section 8)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lightning_fl.datamodules.partitions import (
    IID,
    Dirichlet,
    Partition,
    Quantity,
    Shards,
)
from lightning_fl.datamodules.split import split_train_test


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def balanced_labels(num_classes: int, per_class: int) -> torch.Tensor:
    return torch.arange(num_classes).repeat_interleave(per_class)


def assert_disjoint_cover(parts: list[torch.Tensor], n: int) -> None:
    """Every index in range(n) appears exactly once, each client's list sorted."""
    for p in parts:
        assert p.dtype == torch.long
        assert torch.equal(p, p.sort().values)
    joined = torch.cat(parts)
    assert len(joined) == n
    assert torch.equal(joined.sort().values, torch.arange(n))


def emd(labels: torch.Tensor, parts: list[torch.Tensor], num_classes: int) -> np.ndarray:
    """Independent numpy computation of sum_c |p_k(c) - P(c)|."""
    y = labels.numpy()
    population = np.bincount(y, minlength=num_classes) / len(y)
    out = []
    for p in parts:
        counts = np.bincount(y[p.numpy()], minlength=num_classes)
        out.append(np.abs(counts / counts.sum() - population).sum())
    return np.array(out)


# ----------------------------------------------------------------------------- iid
def test_iid_cover_and_sizes():
    parts = IID()(torch.zeros(103, dtype=torch.long), 10, gen())
    assert_disjoint_cover(parts, 103)
    # 103 = 10 * 10 + 3: three clients of 11, seven of 10
    assert sorted(len(p) for p in parts) == [10] * 7 + [11] * 3


def test_same_seed_same_partition_other_seed_differs():
    labels = balanced_labels(5, 40)
    for partition in [IID(), Dirichlet(alpha=0.5, min_size=2), Shards(classes_per_client=2), Quantity(sigma=1.0)]:
        a = partition(labels, 10, gen(1))
        b = partition(labels, 10, gen(1))
        c = partition(labels, 10, gen(2))
        assert all(torch.equal(x, y) for x, y in zip(a, b)), partition
        assert not all(torch.equal(x, y) for x, y in zip(a, c)), partition


# ----------------------------------------------------------------------------- dirichlet
def test_dirichlet_covers_and_respects_min_size():
    labels = balanced_labels(10, 50)
    parts = Dirichlet(alpha=0.3, min_size=8)(labels, 20, gen())
    assert_disjoint_cover(parts, 500)
    assert min(len(p) for p in parts) >= 8


def test_dirichlet_huge_alpha_is_near_uniform():
    # alpha = 1e4: each class's proportions are 0.1 +- ~0.001, so every client gets 20 +- 1 samples of
    # each of the 10 classes (floor rounding moves at most one sample across a cut). Then
    # |p_k(c) - 0.1| <= ~2/200 per class and the EMD is at most ~0.1; a skewed split is far above.
    labels = balanced_labels(10, 200)
    parts = Dirichlet(alpha=1e4, min_size=1)(labels, 10, gen())
    assert_disjoint_cover(parts, 2000)
    assert emd(labels, parts, 10).max() < 0.15
    assert all(abs(len(p) - 200) <= 20 for p in parts)


def test_dirichlet_tiny_alpha_is_skewed():
    # alpha = 0.01: each class lands (almost) entirely on one of the 5 clients, so a client holds
    # about 20 / 5 = 4 of the 20 equally frequent classes. A client holding m whole classes has
    # EMD 2 (1 - m / 20): 1.6 for m = 4. IID clients would be near 0; require a mean above 1.
    labels = balanced_labels(20, 30)
    parts = Dirichlet(alpha=0.01, min_size=1)(labels, 5, gen())
    assert_disjoint_cover(parts, 600)
    assert emd(labels, parts, 20).mean() > 1.0


def test_dirichlet_gives_up_with_one_line_error():
    # 2 classes, 10 clients, alpha 1e-3: each class goes to ~one client, so 8+ clients stay empty.
    labels = balanced_labels(2, 100)
    with pytest.raises(ValueError, match="min_size") as err:
        Dirichlet(alpha=1e-3, min_size=10, max_tries=20)(labels, 10, gen())
    assert "\n" not in str(err.value)


# ----------------------------------------------------------------------------- shards
def test_shards_one_class_per_client_with_unequal_counts():
    labels = torch.tensor([0] * 7 + [1] * 5 + [2] * 9 + [3] * 3)
    parts = Shards(classes_per_client=1)(labels, 8, gen(3))
    assert_disjoint_cover(parts, 24)
    for p in parts:
        assert labels[p].unique().numel() == 1
    # By hand (D'Hondt, shards start at one per class, the next goes to the class with the largest
    # shards): counts 7, 5, 9, 3 -> shards 2, 2, 3, 1 -> sizes {4, 3}, {3, 2}, {3, 3, 3}, {3}.
    assert sorted(len(p) for p in parts) == [2, 3, 3, 3, 3, 3, 3, 4]
    assert sorted(int(labels[p][0]) for p in parts) == [0, 0, 1, 1, 2, 2, 2, 3]


@pytest.mark.parametrize("seed", range(5))
def test_shards_two_distinct_classes_per_client(seed):
    # 10 classes x 20 samples, 10 clients x 2 shards: 20 shards of 10 samples, 2 per class.
    labels = balanced_labels(10, 20)
    parts = Shards(classes_per_client=2)(labels, 10, gen(seed))
    assert_disjoint_cover(parts, 200)
    for p in parts:
        assert len(p) == 20
        assert labels[p].unique().numel() == 2
        assert sorted(torch.bincount(labels[p]).tolist())[-2:] == [10, 10]


def test_shards_errors_name_the_field():
    labels = balanced_labels(10, 5)
    with pytest.raises(ValueError, match=r"^partition\.classes_per_client must be between 1 and 10"):
        Shards(classes_per_client=11)(labels, 5, gen())
    with pytest.raises(ValueError, match=r"^partition\.classes_per_client must be an integer >= 1; got 0"):
        Shards(classes_per_client=0)  # needs no data: fails when configured
    with pytest.raises(ValueError,
                       match=r"num_clients \* partition\.classes_per_client must be between 10 .* got 3 \* 2 = 6"):
        Shards(classes_per_client=2)(labels, 3, gen())


# ----------------------------------------------------------------------------- quantity
@pytest.mark.parametrize("distribution", ["lognormal", "power_law"])
def test_quantity_cover_and_min_size(distribution):
    parts = Quantity(distribution=distribution, min_size=5)(torch.zeros(1000, dtype=torch.long), 30, gen())
    assert_disjoint_cover(parts, 1000)
    sizes = [len(p) for p in parts]
    assert min(sizes) >= 5
    assert max(sizes) > 2 * min(sizes)  # visibly skewed


def test_quantity_sigma_controls_spread():
    # lognormal(0, 0.05) weights of 30 clients lie within exp(+-3 * 0.05) ~ [0.86, 1.16] of each other,
    # so sizes differ by < 40%; with sigma = 2 the largest/smallest ratio is typically in the hundreds.
    pool = torch.zeros(3000, dtype=torch.long)
    narrow = [len(p) for p in Quantity(sigma=0.05)(pool, 30, gen())]
    wide = [len(p) for p in Quantity(sigma=2.0)(pool, 30, gen())]
    assert max(narrow) / min(narrow) < 1.4
    assert max(wide) / min(wide) > 10


def test_quantity_labels_are_iid():
    # Sizes are skewed but samples are a random permutation: a big client's label mix matches the
    # population (EMD of a 300+ sample draw from 4 balanced classes is ~0.1).
    labels = balanced_labels(4, 500)
    parts = Quantity(sigma=0.5, min_size=300)(labels, 5, gen())
    assert emd(labels, parts, 4).max() < 0.25


# ----------------------------------------------------------------------------- train/test split
def test_split_train_test_sizes_and_disjointness():
    idx = torch.arange(100, 150)
    train, test = split_train_test(idx, 0.2, gen())
    assert (len(train), len(test)) == (40, 10)
    assert torch.equal(torch.cat([train, test]).sort().values, idx)
    train1, test1 = split_train_test(torch.tensor([7]), 0.2, gen())
    assert train1.tolist() == [7] and test1.numel() == 0
    train2, test2 = split_train_test(torch.tensor([3, 4]), 0.9, gen())  # never empties the train split
    assert len(train2) == 1 and len(test2) == 1
    assert split_train_test(idx, 0.0, gen())[1].numel() == 0


@pytest.mark.parametrize("bad", [1.0, -0.1, 2])
def test_split_train_test_rejects_fraction(bad):
    with pytest.raises(ValueError, match=r"^test_fraction must be a number in \[0, 1\)"):
        split_train_test(torch.arange(5), bad, gen())


# ----------------------------------------------------------------------------- configuration objects
def test_partition_classes():
    assert all(issubclass(cls, Partition) for cls in (IID, Dirichlet, Shards, Quantity))
    assert Dirichlet(alpha=0.5) == Dirichlet(alpha=0.5, min_size=10) != Dirichlet(alpha=0.5, min_size=2)
    assert repr(Dirichlet(alpha=0.5)) == "Dirichlet(alpha=0.5, min_size=10, cap_at_mean=False, max_tries=100)"
    assert Shards().options() == {"classes_per_client": 2} and IID().options() == {}


@pytest.mark.parametrize(
    ("make", "num_clients", "field"),
    [
        (lambda: Dirichlet(alpha=0.0), 2, "partition.alpha"),
        (lambda: Dirichlet(alpha=-1.0), 2, "partition.alpha"),
        (lambda: Dirichlet(alpha=float("nan")), 2, "partition.alpha"),
        (lambda: Dirichlet(alpha=1.0, min_size=6), 4, "partition.min_size"),  # 4 * 6 > 20 samples
        (lambda: Dirichlet(alpha=1.0, max_tries=0), 2, "partition.max_tries"),
        (lambda: Shards(classes_per_client=5), 2, "partition.classes_per_client"),  # 4 classes present
        (lambda: Quantity(distribution="zipf"), 2, "partition.distribution"),
        (lambda: Quantity(sigma=0), 2, "partition.sigma"),
        (lambda: Quantity(power=-1), 2, "partition.power"),
        (lambda: Quantity(min_size=0), 2, "partition.min_size"),
        (lambda: IID(), 0, "num_clients"),
        (lambda: IID(), 21, "num_clients"),
    ],
)
def test_errors_are_one_line_and_name_the_field(make, num_clients, field):
    labels = balanced_labels(4, 5)
    with pytest.raises(ValueError) as err:
        make().validate(labels, num_clients)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(field)


def test_validate_draws_nothing_and_call_validates_first():
    labels, generator = balanced_labels(4, 5), gen(3)
    state = generator.get_state()
    Dirichlet(alpha=1.0, min_size=5).validate(labels, 4)
    assert torch.equal(generator.get_state(), state)
    with pytest.raises(ValueError, match="^partition.min_size must be at most 5"):
        Dirichlet(alpha=1.0, min_size=6)(labels, 4, generator)
    assert torch.equal(generator.get_state(), state)


def test_dirichlet_alpha_is_required():
    with pytest.raises(TypeError, match="alpha"):
        Dirichlet()  # type: ignore[call-arg]
