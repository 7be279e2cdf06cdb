"""The CPU column kernels of the coordinate rules against torch references on stacks of several chunks.

The references here are written with ``torch.sort(dim=0, stable=True)`` on the whole stack (the
reading of docs/algorithms.md), independent of the chunked NumPy path: they must agree bit for bit on
values (a median or a weighted median is one of the inputs or the midpoint of two), and to rounding
on means (the summation order differs).
"""

from __future__ import annotations

import pytest
import torch

from lightning_fl.functional import robust_columns
from lightning_fl.functional.robust import coordinate_median, trimmed_mean
from lightning_fl.functional.robust_distance import bulyan, pairwise_sq_distances

# More columns than one chunk, so chunk edges and the thread split are crossed.
P = 2 * robust_columns.CHUNK + 37


def _stack(k: int, ties: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(k)
    U = torch.randn(k, P, generator=g)
    if ties:
        # Few distinct values per column: equal values everywhere, signed zeros included.
        U = torch.randint(-2, 3, (k, P), generator=g).float() * 0.5
        U[0, ::3] = -0.0
        U[1, ::3] = 0.0
    return U


def _dyadic(k: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 + k)
    raw = torch.randint(1, 8, (k,), generator=g).double()
    total = 2 ** int(torch.ceil(torch.log2(raw.sum())))
    raw[-1] += total - raw.sum()  # weights sum to a power of two: F_i = 1/2 is hit exactly
    return (raw / total).float()


def _stable_sorted(U: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    values, order = torch.sort(U, dim=0, stable=True)
    return values, torch.cumsum(p.double()[order], dim=0)


CASES = [(k, ties) for k in (5, 8, 33) for ties in (False, True)]


@pytest.mark.parametrize(("k", "ties"), CASES)
def test_median_matches_quantile_bitwise(k, ties):
    U = _stack(k, ties)
    assert torch.equal(coordinate_median(U), torch.quantile(U, 0.5, dim=0))


@pytest.mark.parametrize(("k", "ties"), CASES)
def test_trimmed_mean_matches_the_sorted_slice(k, ties):
    U = _stack(k, ties)
    b = k // 4
    expected = torch.sort(U, dim=0).values[b:k - b].double().mean(dim=0).float()
    assert torch.allclose(trimmed_mean(U, b), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("k", "ties"), CASES)
def test_weighted_median_matches_a_stable_torch_reference(k, ties):
    U, p = _stack(k, ties), _dyadic(k)
    values, cum = _stable_sorted(U, p)
    first = (cum < 0.5).sum(dim=0, keepdim=True).clamp_max(k - 1)
    lower = values.gather(0, first)
    upper = values.gather(0, (first + 1).clamp_max(k - 1))
    expected = torch.where(cum.gather(0, first) == 0.5, (lower + upper) / 2, lower).squeeze(0)
    got = coordinate_median(U, p, weighted=True)
    # Equal as numbers; a zero's sign may differ where -0.0 and +0.0 tie.
    assert torch.equal(got, expected)


@pytest.mark.parametrize(("k", "ties"), CASES)
def test_weighted_trimmed_mean_matches_a_stable_torch_reference(k, ties):
    U, p = _stack(k, ties), _dyadic(k)
    beta = 0.2
    values, cum = _stable_sorted(U, p)
    prev = cum - p.double()[torch.sort(U, dim=0, stable=True).indices]
    kept = (torch.clamp(cum, max=1 - beta) - prev.clamp_min(beta)).clamp_min(0.0)
    expected = ((kept * values.double()).sum(dim=0) / (1 - 2 * beta)).float()
    got = trimmed_mean(U, 0, p, weighted=True, beta=beta)
    assert torch.allclose(got, expected, rtol=1e-6, atol=1e-7)


def test_weighted_ties_go_to_the_lower_cohort_index():
    # One column, values 1, 1, 2 with weights 1/2, 1/4, 1/4: in cohort order F reaches 1/2 exactly at
    # row 0, so the median is (1 + 1) / 2 = 1; the trimmed mean with beta = 1/4 keeps 1/4 of row 0's 1
    # and all of row 1's 1: (1/4 + 1/4) / (1/2) = 1. Swapping the tied rows' weights moves F = 1/2.
    U = torch.tensor([[1.0], [1.0], [2.0]])
    p = torch.tensor([0.5, 0.25, 0.25])
    assert robust_columns.weighted_median(U, p).tolist() == [1.0]
    q = torch.tensor([0.25, 0.25, 0.5])
    # F = 1/4, 1/2 (exactly, at the second 1), 1: midpoint of 1 and 2.
    assert robust_columns.weighted_median(U, q).tolist() == [1.5]


def test_kernels_never_write_into_the_stack():
    U = _stack(7, False)
    before = U.clone()
    coordinate_median(U), trimmed_mean(U, 2), coordinate_median(U, _dyadic(7), weighted=True)
    one_column = before[:, :1].clone()
    coordinate_median(one_column)
    assert torch.equal(U, before) and torch.equal(one_column, before[:, :1])


def test_bulyan_matches_a_stable_sort_reference():
    # K = 11, f = 2: theta = 7 picks, beta = 3 values closest to the picks' median per coordinate.
    U = _stack(11, ties=True)
    got, picked = bulyan(U, 2)
    picks = U[picked]
    median = torch.quantile(picks, 0.5, dim=0)
    closest = torch.sort((picks - median).abs(), dim=0, stable=True).indices[:3]
    expected = picks.gather(0, closest).double().mean(dim=0).float()
    assert picked.numel() == 7
    assert torch.allclose(got, expected, rtol=1e-6, atol=1e-7)


def test_exact_distances_are_differences_not_a_gram_product():
    # Rows far from the origin and close together: the Gram form cancels, differences do not.
    g = torch.Generator().manual_seed(3)
    U = 1000.0 + torch.randn(6, 5000, generator=g) * 1e-2
    expected = torch.tensor([[float(((U[i].double() - U[j].double()) ** 2).sum()) for j in range(6)]
                             for i in range(6)])
    got = pairwise_sq_distances(U)
    assert torch.equal(got, got.T) and torch.equal(got.diagonal(), torch.zeros(6))
    assert torch.allclose(got.double(), expected.double(), rtol=1e-4)
