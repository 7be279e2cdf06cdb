"""Tests for DWFed ISH weights (SPEC section 5)."""

from __future__ import annotations

import pytest
import torch

from lightning_fl.functional.dwfed import cohort_emd, ish_weights

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
