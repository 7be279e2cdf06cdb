"""Tests for DWFed ISH weights and the two readings of its distance (docs/algorithms.md, DWFed)."""

from __future__ import annotations

import pytest
import torch

from lightning_fl.datamodules.partitions import Shards

from lightning_fl.functional.dwfed import cohort_emd, distance_to_population, ish_weights
from lightning_fl.functional.label_stats import wasserstein_1d

F64 = torch.float64


def test_ish_by_hand() -> None:
    # K = 3, eta = 1, D = [0, 1, 2]: ISH = [1, (1 - 1/3) / 2, (1 - 2/3) / 3] = [1, 1/3, 1/9]; sum 13/9
    w, degenerate = ish_weights(torch.tensor([0.0, 1.0, 2.0], dtype=F64), cohort_size=3)
    assert torch.allclose(w, torch.tensor([9 / 13, 3 / 13, 1 / 13], dtype=F64), rtol=1e-15, atol=0)
    assert degenerate is False


def test_ish_eta_and_clamp() -> None:
    # eta = 3: ISH = [1, (1 - 1) / 2 = 0, (1 - 2) / 3 < 0 -> 0]
    w, _ = ish_weights(torch.tensor([0.0, 1.0, 2.0], dtype=F64), cohort_size=3, eta_ish=3.0)
    assert torch.equal(w, torch.tensor([1.0, 0.0, 0.0], dtype=F64))
    # eta = client lr 0.1: ISH = [(1 - 0.05 * 0.5) / 1.5, 1 / 1] (K = 2, D = [0.5, 0])
    w, _ = ish_weights(torch.tensor([0.5, 0.0], dtype=F64), cohort_size=2, eta_ish=0.1)
    raw = [(1 - 0.1 * 0.5 / 2) / 1.5, 1.0]
    assert torch.allclose(w, torch.tensor([r / sum(raw) for r in raw], dtype=F64), rtol=1e-15, atol=0)


def test_all_clamped_falls_back_to_uniform() -> None:
    w, degenerate = ish_weights(torch.tensor([1.5, 2.0]), cohort_size=2, eta_ish=2.0)
    assert torch.equal(w, torch.tensor([0.5, 0.5])) and degenerate is True
    w, degenerate = ish_weights(torch.tensor([2.0]), cohort_size=1, eta_ish=2.0)  # one client: weight 1
    assert torch.equal(w, torch.tensor([1.0])) and degenerate is False


def test_weight_by_samples() -> None:
    # D = [0, 1], K = 2: ISH = [1, 0.25]; times n = [1, 4] -> [1, 1]
    w, _ = ish_weights(torch.tensor([0.0, 1.0], dtype=F64), 2, num_samples=torch.tensor([1, 4]))
    assert torch.equal(w, torch.tensor([0.5, 0.5], dtype=F64))


def test_cohort_emd_uses_whole_population() -> None:
    # P = ([4, 0] + [0, 4] + [2, 2]) / 12 = [0.5, 0.5]; D = [1, 1, 0]; cohort [2, 0] -> [0, 1]
    hist = torch.tensor([[4, 0], [0, 4], [2, 2]])
    assert torch.equal(cohort_emd(hist, torch.tensor([2, 0])), torch.tensor([0.0, 1.0], dtype=F64))
    w, _ = ish_weights(cohort_emd(hist, torch.tensor([2, 0])), cohort_size=2)
    assert torch.equal(w, torch.tensor([0.8, 0.2], dtype=F64))  # ISH = [1, 0.25]


def test_cohort_emd_with_unequal_client_sizes() -> None:
    # Sizes 8, 3, 2: P = [8, 5] / 13 (counts summed, not the mean [7/12, 5/12] of the clients' distributions);
    # D_0 = |3/4 - 8/13| + |1/4 - 5/13| = 7/26, D_1 = 2 * 8/13 = 16/13, D_2 = 2 * 5/13 = 10/13.
    hist = torch.tensor([[6, 2], [0, 3], [2, 0]])
    emd = cohort_emd(hist, torch.tensor([0, 1, 2]))
    assert torch.allclose(emd, torch.tensor([7 / 26, 16 / 13, 10 / 13], dtype=F64), rtol=1e-15, atol=0)
    # K = 3: ISH = [(1 - 7/78) / (33/26), (1 - 16/39) / (29/13), (1 - 10/39) / (23/13)] = [71/99, 23/87, 29/69]
    w, _ = ish_weights(emd, cohort_size=3)
    raw = [71 / 99, 23 / 87, 29 / 69]
    assert torch.allclose(w, torch.tensor([r / sum(raw) for r in raw], dtype=F64), rtol=1e-14, atol=0)


def test_validation() -> None:
    with pytest.raises(ValueError, match="cohort_size must be >= 1"):
        ish_weights(torch.zeros(1), cohort_size=0)


# ---------------------------------------------------------------- distance: wasserstein (the order-dependent reading)


def test_wasserstein_1d_by_hand() -> None:
    # Unit mass moved from index 0 to index 2 crosses two gaps: 2. Half of it moved one gap: 0.5.
    assert wasserstein_1d(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 0.0, 1.0])).item() == 2.0
    assert wasserstein_1d(torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.0, 1.0, 0.0])).item() == 0.5
    # Order matters (L1 would give 2 for both): 0 -> 1 costs 1, 0 -> 3 costs 3.
    p = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]], dtype=F64)
    assert torch.equal(wasserstein_1d(p, torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64)), torch.tensor([1.0, 3.0], dtype=F64))


def test_wasserstein_to_population_by_hand() -> None:
    # Counts [[2, 1, 1], [0, 0, 4], [2, 2, 0]]: P = [4, 3, 5] / 12, F_P = [4/12, 7/12] (the last, 1, is left out).
    #   F_0 = [6/12, 9/12]:   D_0 = 2/12 + 2/12 = 1/3
    #   F_1 = [0, 0]:         D_1 = 4/12 + 7/12 = 11/12
    #   F_2 = [6/12, 12/12]:  D_2 = 2/12 + 5/12 = 7/12
    hist = torch.tensor([[2, 1, 1], [0, 0, 4], [2, 2, 0]])
    expected = torch.tensor([1 / 3, 11 / 12, 7 / 12], dtype=F64)
    assert torch.allclose(distance_to_population(hist, "wasserstein"), expected, rtol=1e-15, atol=1e-15)
    assert torch.allclose(cohort_emd(hist, torch.tensor([2, 1]), distance="wasserstein"), expected[[2, 1]],
                          rtol=1e-15, atol=1e-15)
    # One class: nothing to move, D = 0.
    assert torch.equal(distance_to_population(torch.tensor([[3], [5]]), "wasserstein"), torch.zeros(2, dtype=F64))


def test_l1_is_the_default_and_unchanged_bitwise() -> None:
    # The L1 reading written out here as a reference: (p_k - P).abs().sum() in float64.
    hist = torch.tensor([[6, 2, 0], [0, 3, 1], [2, 0, 7], [1, 1, 1]])
    counts = hist.double()
    reference = (counts / counts.sum(1, keepdim=True) - counts.sum(0) / counts.sum()).abs().sum(1)
    cohort = torch.tensor([3, 0, 2])
    assert torch.equal(cohort_emd(hist, cohort), reference[cohort])
    assert torch.equal(cohort_emd(hist, cohort, distance="l1"), reference[cohort])
    assert torch.equal(distance_to_population(hist), reference)


def test_unknown_distance_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"^distance must be one of l1, wasserstein; got 'emd'$"):
        distance_to_population(torch.ones(2, 2), "emd")


def _cdf_distance(counts: list[int]) -> float:
    # Simple reference for a uniform population over 10 classes: sum over the 9 gaps of |F_k(c) - (c + 1)/10|.
    total, running, d = sum(counts), 0, 0.0
    for c in range(9):
        running += counts[c]
        d += abs(running / total - (c + 1) / 10)
    return d


def _ish(d: float, k: int = 20) -> float:
    return (1 - d / k) / (1 + d)


def test_paper_partitions_by_hand_give_the_expected_weight_ratios() -> None:
    # The paper's equal-size partitions of a class-balanced 10-class set (Fashion-MNIST): 1-class clients hold 60
    # images of one class (10 clients per class), 2-class clients 30 + 30 of two different classes (every pair).
    # Population uniform, F_P(c) = (c + 1)/10.
    # 1-class, class j: D = (j(j+1)/2 + (9-j)(10-j)/2) / 10, from 4.5 (j = 0 or 9) down to 2.5 (j = 4 or 5).
    # With K = 20 (C = 0.2 of 100 devices): ISH(2.5) = (1 - 1/8) / 3.5 = 1/4, ISH(4.5) = (1 - 9/40) / 5.5 = 31/220,
    # max/min weight = (1/4) / (31/220) = 55/31 = 1.774 (about 1.8x).
    # 2-class {a, b}: the extremes are {2, 7} (D = 0.3 + 0.6 + 0.3 = 1.2) and {0, 1} or {8, 9} (D = 0.4 + 3.6 = 4.0);
    # ISH(1.2) = 0.94 / 2.2 = 47/110, ISH(4.0) = 0.8 / 5 = 4/25: ratio (47/110) / (4/25) = 235/88 = 2.670 (about 2.7x).
    one = torch.zeros(100, 10, dtype=torch.long)
    one[torch.arange(100), torch.arange(100) % 10] = 60
    pairs = [(a, b) for a in range(10) for b in range(a + 1, 10)]
    two = torch.zeros(len(pairs), 10, dtype=torch.long)
    for k, (a, b) in enumerate(pairs):
        two[k, a] = two[k, b] = 30
    for hist, l1, ratio, extremes in ((one, 1.8, 55 / 31, (2.5, 4.5)), (two, 1.6, 235 / 88, (1.2, 4.0))):
        by_hand = torch.tensor([_cdf_distance(row.tolist()) for row in hist], dtype=F64)
        w1 = distance_to_population(hist, "wasserstein")
        assert torch.allclose(w1, by_hand, rtol=0, atol=1e-12)
        assert (w1.min().item(), w1.max().item()) == pytest.approx(extremes, abs=1e-12)
        # L1: every client at the same distance (0.9 + 9 x 0.1, or 2 x 0.4 + 8 x 0.1), so the weights are 1/K.
        assert torch.allclose(distance_to_population(hist, "l1"), torch.full((len(hist),), l1, dtype=F64), atol=1e-12)
        cohort = torch.stack([w1.argmin(), w1.argmax(), *torch.arange(18)])  # a cohort of 20 with both extremes
        weights, _ = ish_weights(cohort_emd(hist, cohort, "wasserstein"), cohort_size=20)
        assert (weights.max() / weights.min()).item() == pytest.approx(ratio, rel=1e-12)
        assert ratio == pytest.approx(_ish(extremes[0]) / _ish(extremes[1]), rel=1e-12)
        l1_weights, _ = ish_weights(cohort_emd(hist, cohort, "l1"), cohort_size=20)
        assert torch.allclose(l1_weights, torch.full((20,), 1 / 20, dtype=F64), rtol=1e-12, atol=0)


@pytest.mark.parametrize("classes", [1, 2])
def test_shards_partition_distances_match_the_reference(classes: int) -> None:
    # The partition the reproduction trains on (600 balanced labels to 100 clients): each client's histogram
    # counted here, its distance from the reference above, and the weight ratio in a cohort of 20 within the
    # bounds worked out by hand (1-class: every class present, so exactly 55/31).
    labels = torch.arange(600) % 10
    clients = Shards(classes_per_client=classes)(labels, 100, torch.Generator().manual_seed(0))
    hist = torch.stack([torch.bincount(labels[c], minlength=10) for c in clients])
    w1 = distance_to_population(hist, "wasserstein")
    assert torch.allclose(w1, torch.tensor([_cdf_distance(r.tolist()) for r in hist], dtype=F64), atol=1e-12)
    ratio = _ish(w1.min().item()) / _ish(w1.max().item())
    if classes == 1:
        assert ratio == pytest.approx(55 / 31, rel=1e-12)
    else:
        assert 2.0 < ratio <= 235 / 88 + 1e-12
