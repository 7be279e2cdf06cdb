"""O(K) uniform sampling without replacement (Floyd's algorithm) for large federations (docs/scaling.md)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from scipy import stats

from lightning_fl.simulation.sampling import (
    LARGE_FEDERATION,
    ClientSampler,
    floyd_subset,
    sample_without_replacement,
)
from lightning_fl.state.seeding import derive_seed


def test_floyd_by_hand():
    # n = 5, k = 3: j = 2, 3, 4. u = 0.9: t = floor(2.7) = 2 -> {2}; u = 0.5: t = floor(2.0) = 2, taken,
    # so j = 3 -> {2, 3}; u = 0.1: t = floor(0.5) = 0 -> {0, 2, 3}.
    assert floyd_subset(5, [0.9, 0.5, 0.1]) == [0, 2, 3]
    # Every t collides: u = 0 always draws 0, so the later steps keep j = 1, 2.
    assert floyd_subset(3, [0.0, 0.0, 0.0]) == [0, 1, 2]
    # u just below 1 would round up to j + 1 in the float product; it stays j.
    assert floyd_subset(4, [1 - 2**-53]) == [3]
    assert floyd_subset(4, []) == []
    with pytest.raises(ValueError, match="cannot draw 5 distinct ids from 4"):
        floyd_subset(4, [0.5] * 5)


def test_draws_are_distinct_in_range_sorted_and_deterministic():
    for seed in range(20):
        ids = sample_without_replacement(10**6, 1000, torch.Generator().manual_seed(seed))
        assert ids.dtype == torch.long and len(ids) == 1000 and len(set(ids.tolist())) == 1000
        assert int(ids.min()) >= 0 and int(ids.max()) < 10**6 and ids.tolist() == sorted(ids.tolist())
        assert torch.equal(ids, sample_without_replacement(10**6, 1000, torch.Generator().manual_seed(seed)))
    assert sample_without_replacement(7, 7, torch.Generator()).tolist() == list(range(7))
    assert sample_without_replacement(7, 0, torch.Generator()).tolist() == []


def test_every_subset_is_equally_likely_chi_square():
    n, k, draws = 6, 2, 15_000
    generator = torch.Generator().manual_seed(11)
    counts = dict.fromkeys(itertools.combinations(range(n), k), 0)
    for _ in range(draws):
        counts[tuple(sample_without_replacement(n, k, generator).tolist())] += 1
    assert len(counts) == math.comb(n, k)  # nothing outside the C(6, 2) = 15 subsets appeared
    # Uniform: each of the 15 subsets expected draws / 15 = 1000 times.
    assert stats.chisquare(list(counts.values())).pvalue > 1e-3


def test_inclusion_is_uniform_over_a_large_population_chi_square():
    # Where the algorithm does most of its work from the top of the range (j close to n), the low ids
    # must still come out as often: bins of 1000 ids each hold k/n of the draws.
    n, k, rounds = 10_000, 50, 400
    generator = torch.Generator().manual_seed(5)
    bins = torch.zeros(10)
    for _ in range(rounds):
        bins += torch.bincount(sample_without_replacement(n, k, generator) // 1000, minlength=10)
    assert stats.chisquare(bins.tolist()).pvalue > 1e-3


def test_sampler_switches_to_floyd_above_the_threshold_only():
    seed, k = 4, 10
    for n in (LARGE_FEDERATION, LARGE_FEDERATION + 1):
        sampler = ClientSampler(n, k, "uniform", seed=seed)
        for t in range(3):
            # The cohort stream is keyed (seed, "cohort", t) (docs/algorithms.md, Sampling).
            gen = torch.Generator().manual_seed(derive_seed(seed, "cohort", t))
            if n <= LARGE_FEDERATION:  # what every run has drawn so far: a permutation's first K
                expected = torch.randperm(n, generator=gen)[:k].sort().values
            else:
                expected = torch.tensor(floyd_subset(n, torch.rand(k, generator=gen, dtype=torch.float64).tolist()))
            assert torch.equal(sampler.sample(t), expected)


def test_a_billion_clients_sample_without_an_n_sized_permutation():
    # randperm(10**9) would need 8 GB; the draw takes the cohort's memory and time only.
    sampler = ClientSampler(10**9, 1000, "uniform", seed=0)
    cohort = sampler.sample(3)
    assert len(set(cohort.tolist())) == 1000 and int(cohort.max()) < 10**9
    assert torch.equal(cohort, ClientSampler(10**9, 1000, "uniform", seed=0).sample(3))
    assert not torch.equal(cohort, sampler.sample(4))
