"""PerClientDirichlet (Hsu et al. 2019; IGFL section 5.1; Tempo section 4) and its count allocation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lightning_fl.datamodules import PooledDataModule
from lightning_fl.datamodules.largest_remainder import (
    largest_remainder,
    rows_largest_remainder,
)
from lightning_fl.datamodules.partitions import PerClientDirichlet
from lightning_fl.datamodules.partitions.per_client_dirichlet import allocate_counts

from lightning_fl.state.seeding import derive_seed


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def labels_with(counts: list[int]) -> torch.Tensor:
    return torch.arange(len(counts)).repeat_interleave(torch.tensor(counts))


def histograms(labels: torch.Tensor, parts: list[torch.Tensor], num_classes: int) -> np.ndarray:
    return np.stack([np.bincount(labels[p].numpy(), minlength=num_classes) for p in parts])


def hamilton(weights: np.ndarray, total: int) -> list[int]:
    """Reference rounding written here: floors, then +1 to the largest remainders (first index on ties)."""
    raw = [w / sum(weights) * total for w in weights]
    out = [int(np.floor(r)) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: -(raw[i] - out[i]))[: total - sum(out)]:
        out[i] += 1
    return out


def test_huge_rho_gives_every_client_the_prior_mix():
    # rho = 1e6: q_k = p up to ~5e-4, so client k's 10 samples are round(10 p) per class.
    # population prior, counts 30/30/20/20: p = (.3, .3, .2, .2) -> (3, 3, 2, 2) each; 10 clients use all 100.
    labels = labels_with([30, 30, 20, 20])
    parts = PerClientDirichlet(rho=1e6, size=10)(labels, 10, gen())
    assert histograms(labels, parts, 4).tolist() == [[3, 3, 2, 2]] * 10
    assert torch.equal(torch.cat(parts).sort().values, torch.arange(100))  # every sample once
    # unbalanced pool 40/20/20/20: population p -> (4, 2, 2, 2) of 10; uniform p -> (2, 2, 2, 2) of 8
    labels = labels_with([40, 20, 20, 20])
    assert histograms(labels, PerClientDirichlet(rho=1e6, size=10)(labels, 5, gen()), 4).tolist() == [[4, 2, 2, 2]] * 5
    uniform = PerClientDirichlet(rho=1e6, size=8, prior="uniform")(labels, 5, gen())
    assert histograms(labels, uniform, 4).tolist() == [[2, 2, 2, 2]] * 5


def test_counts_are_the_rounded_draws_of_each_clients_own_stream():
    # Reference: q_k = default_rng(derive_seed(s, "proportions", k)).dirichlet(rho p), s the first draw of
    # the partition's generator (docs/datasets.md); a pool of 500 per class never runs out for 8 x 40.
    labels = labels_with([500, 300, 200])
    p = np.array([0.5, 0.3, 0.2])
    s = int(torch.randint(0, 2**62, (1,), generator=gen(7)))
    expected = [hamilton(np.random.default_rng(derive_seed(s, "proportions", k)).dirichlet(0.7 * p), 40)
                for k in range(8)]
    parts = PerClientDirichlet(rho=0.7, size=40)(labels, 8, gen(7))
    assert histograms(labels, parts, 3).tolist() == expected
    assert len(torch.cat(parts).unique()) == 320  # no sample twice


def test_a_client_does_not_depend_on_the_others():
    labels = labels_with([400, 400, 400])
    for replacement in (False, True):
        five = PerClientDirichlet(rho=0.5, size=20, replacement=replacement)(labels, 5, gen(3))
        eight = PerClientDirichlet(rho=0.5, size=20, replacement=replacement)(labels, 8, gen(3))
        assert (histograms(labels, five, 3) == histograms(labels, eight[:5], 3)).all()
        if replacement:  # with replacement even the samples are the client's own draw
            assert all(torch.equal(a, b) for a, b in zip(five, eight))


def test_concentration_is_total_and_prior_sets_the_mean():
    # q_kc ~ Beta(rho p_c, rho (1 - p_c)): mean p_c, variance p_c (1 - p_c) / (rho + 1). Ten balanced
    # classes, rho = 1: variance 0.09 / 2 = 0.045 (a per-class Dir(rho) would give 0.09 / 11 = 0.008).
    # 400 clients: the sample variance is within ~0.002 of 0.045 (seeds 0-4: 0.0437-0.0456).
    labels = labels_with([50] * 10)
    frac = histograms(labels, PerClientDirichlet(rho=1.0, size=100, replacement=True)(labels, 400, gen()), 10) / 100
    assert abs(frac.mean() - 0.1) < 1e-9
    assert 0.035 < frac.var() < 0.055
    # Pool 70/10/10/10 %: the mean share of class 0 over 400 clients is p_0 +- ~0.02 (sd 0.016 for
    # Beta(0.7, 0.3), 0.015 for Beta(0.25, 0.75)): 0.7 with the population prior, 0.25 with uniform.
    labels = labels_with([700, 100, 100, 100])
    for prior, p0 in (("population", 0.7), ("uniform", 0.25)):
        parts = PerClientDirichlet(rho=1.0, size=100, prior=prior, replacement=True)(labels, 400, gen())
        assert abs(histograms(labels, parts, 4)[:, 0].mean() / 100 - p0) < 0.06, prior


def test_a_class_that_runs_out_is_shared_and_the_rest_asked_elsewhere():
    # Uniform prior, rho = 1e6: every client wants (5, 5) of 10, but class 0 has 10 samples for a demand of
    # 20. It is shared in proportion to the asks (5, 5, 5, 5) -> 2.5 each -> (3, 3, 2, 2) (ties by
    # position); the shortfall comes from class 1: (7, 7, 8, 8). 10 of the 40 samples moved.
    labels = labels_with([10, 30])
    with pytest.warns(UserWarning, match=r"10 of 40 samples \(25.0%\)"):
        parts = PerClientDirichlet(rho=1e6, size=10, prior="uniform")(labels, 4, gen())
    assert histograms(labels, parts, 2).tolist() == [[3, 7], [3, 7], [2, 8], [2, 8]]
    assert torch.equal(torch.cat(parts).sort().values, torch.arange(40))


def test_allocate_counts_by_hand():
    # Round 1 asks (10,0) (10,0) (5,5) (0,10); class 0 has 10 for 25 asked -> shares 4, 4, 2, 0.
    # Round 2: class 0 is empty; clients 0 and 1 want nothing else, so they take the remaining pool's mix
    # (class 1 only): 6 and 6; client 2 its missing 3 from class 1. Class totals 10 and 30.
    q = np.array([[1.0, 0.0], [1.0, 0.0], [0.5, 0.5], [0.0, 1.0]])
    counts = allocate_counts(q, np.array([10, 10, 10, 10]), np.array([10, 30]))
    assert counts.tolist() == [[4, 6], [4, 6], [2, 8], [0, 10]]
    # Client 0 wants 6 of class 0, which has 2; the other 4 follow what is left, classes 1 and 2 at
    # 7 : 3 (client 1 took 2 of class 1's 9): 2.8 and 1.2 -> 3 and 1 (not 2 and 2, an even spread).
    counts = allocate_counts(np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), np.array([6, 2]), np.array([2, 9, 3]))
    assert counts.tolist() == [[2, 3, 1], [0, 2, 0]]
    with pytest.raises(ValueError, match="need 41 samples but only 40"):
        allocate_counts(q, np.array([10, 10, 10, 11]), np.array([10, 30]))


def test_rows_largest_remainder_matches_the_one_row_version():
    rng = np.random.default_rng(0)
    weights = rng.random((50, 7)) * (rng.random((50, 7)) < 0.6)
    weights[3] = 0.0  # an all-zero row counts as equal weights
    totals = rng.integers(0, 40, 50)
    rows = rows_largest_remainder(weights, totals)
    assert all(rows[i].tolist() == largest_remainder(weights[i], int(totals[i])).tolist() for i in range(50))


def test_size_none_uses_the_whole_pool_and_replacement_shares():
    labels = labels_with([25, 25, 25, 25])
    with pytest.warns(UserWarning, match="classes ran out"):  # 98 of 100 samples: some class runs out
        parts = PerClientDirichlet(rho=2.0, size=None)(labels, 7, gen())
    assert [len(p) for p in parts] == [14] * 7  # 100 // 7
    assert not PerClientDirichlet(rho=1.0).shares_samples and PerClientDirichlet(rho=1.0, replacement=True).shares_samples
    # 30 clients x 10 = 300 > 100 samples: only with replacement
    shared = PerClientDirichlet(rho=2.0, size=10, replacement=True)(labels, 30, gen())
    assert [len(p) for p in shared] == [10] * 30 and len(torch.cat(shared).unique()) < 300


@pytest.mark.parametrize(
    ("make", "num_clients", "message"),
    [(lambda: PerClientDirichlet(rho=0.0), 2, "partition.rho must be a finite number > 0; got 0.0"),
     (lambda: PerClientDirichlet(rho=1.0, size=0), 2, "partition.size must be an integer >= 1; got 0"),
     (lambda: PerClientDirichlet(rho=1.0, prior="flat"), 2, "partition.prior must be one of population, uniform"),
     (lambda: PerClientDirichlet(rho=1.0, replacement="yes"), 2, "partition.replacement must be true or false"),
     (lambda: PerClientDirichlet(rho=1.0, size=3), 7,
      ("partition.size * num_clients must be at most 20 (the samples) without replacement; got 3 * 7 = 21;"
       " lower partition.size or set partition.replacement: true"))],
)
def test_errors_are_one_line_and_name_the_field(make, num_clients, message):
    with pytest.raises(ValueError) as err:
        make()(labels_with([5, 5, 5, 5]), num_clients, gen())
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    PerClientDirichlet(rho=1.0, size=3, replacement=True).validate(labels_with([5, 5, 5, 5]), 7)  # fine shared


def test_pooled_datamodule_refuses_a_per_client_test_split_of_shared_samples():
    x, y = torch.randn(60, 2), labels_with([20, 20, 20])
    partition = PerClientDirichlet(rho=1.0, size=30, replacement=True)
    with pytest.raises(ValueError, match=r"^test_fraction must be 0 with PerClientDirichlet\(") as err:
        PooledDataModule(x, y, partition=partition, num_clients=4).setup()
    assert "\n" not in str(err.value)
    dm = PooledDataModule(x, y, partition=partition, num_clients=4, test_fraction=0.0, val_fraction=0.0)
    dm.setup()
    assert dm.label_histograms().sum(dim=1).tolist() == [30, 30, 30, 30]  # reported like any partition
    assert dm.emd_to_population().shape == (4,)
