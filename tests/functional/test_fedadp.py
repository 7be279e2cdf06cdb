"""Tests for FedAdp weights (SPEC section 2)."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fl.functional.fedadp import (
    cosine_similarity_rows,
    fedadp_weights,
    gompertz,
)

F64 = torch.float64


def _gompertz(theta: float, a: float = 5.0) -> float:
    return a * (1 - math.exp(-math.exp(-a * (theta - 1))))


def test_gompertz_values() -> None:
    assert float(gompertz(torch.tensor(1.0, dtype=F64))) == pytest.approx(5 * (1 - math.exp(-1)), rel=1e-15)
    theta = torch.tensor([0.0, 0.5, math.pi / 2], dtype=F64)
    expected = torch.tensor([_gompertz(x) for x in theta.tolist()], dtype=F64)
    assert torch.allclose(gompertz(theta), expected, rtol=1e-14, atol=0)


def test_hand_example_first_participation() -> None:
    # g1 = [1, 0], g2 = [0, 1]; n = [1, 3] -> g = [0.25, 0.75], |g| = sqrt(0.625)
    # cos1 = 0.25 / |g|, cos2 = 0.75 / |g|; first time (m = 1): smoothed = instantaneous
    w = torch.zeros(2, dtype=F64)
    client_w = torch.tensor([[-1.0, 0.0], [0.0, -1.0]], dtype=F64)
    n = torch.tensor([1.0, 3.0], dtype=F64)
    out = fedadp_weights(w, client_w, n, torch.full((2,), float("nan"), dtype=F64), torch.tensor([1, 1]))
    norm = math.sqrt(0.625)
    theta = [math.acos(0.25 / norm), math.acos(0.75 / norm)]
    assert torch.allclose(out.instantaneous_angle, torch.tensor(theta, dtype=F64), rtol=1e-14, atol=0)
    assert torch.equal(out.smoothed_angle, out.instantaneous_angle)  # NaN placeholder ignored
    raw = [1.0 * math.exp(_gompertz(theta[0])), 3.0 * math.exp(_gompertz(theta[1]))]
    expected = torch.tensor([r / sum(raw) for r in raw], dtype=F64)
    assert torch.allclose(out.weights, expected, rtol=1e-13, atol=0)
    assert out.degenerate is False


def test_smoothing_with_history() -> None:
    # both clients at angle pi/4 (symmetric, n equal); client 0 seen 3 times with stored angle 1.0
    w = torch.zeros(2, dtype=F64)
    client_w = torch.tensor([[-1.0, 0.0], [0.0, -1.0]], dtype=F64)
    n = torch.tensor([1.0, 1.0], dtype=F64)
    out = fedadp_weights(w, client_w, n, torch.tensor([1.0, 0.3], dtype=F64), torch.tensor([3, 1]))
    expected0 = (2 * 1.0 + math.pi / 4) / 3
    assert float(out.smoothed_angle[0]) == pytest.approx(expected0, rel=1e-14)
    assert float(out.smoothed_angle[1]) == pytest.approx(math.pi / 4, rel=1e-14)
    raw = [math.exp(_gompertz(expected0)), math.exp(_gompertz(math.pi / 4))]
    assert float(out.weights[0]) == pytest.approx(raw[0] / sum(raw), rel=1e-13)


def test_zero_update_gets_right_angle_not_nan() -> None:
    w = torch.ones(3)
    client_w = torch.stack([w, w - torch.tensor([1.0, 0.0, 0.0])])  # client 0 did not move
    out = fedadp_weights(w, client_w, torch.tensor([5, 5]), torch.zeros(2), torch.tensor([1, 1]))
    assert torch.isfinite(out.weights).all()
    assert float(out.instantaneous_angle[0]) == pytest.approx(math.pi / 2, rel=1e-6)
    assert float(out.instantaneous_angle[1]) == pytest.approx(0.0, abs=1e-3)


def test_cancelling_updates_reduce_to_fedavg() -> None:
    # g = 0.5 [1, 0] + 0.5 [-1, 0] = 0: every angle is pi/2, so psi = n / sum n
    w = torch.zeros(2, dtype=F64)
    client_w = torch.tensor([[-1.0, 0.0], [1.0, 0.0]], dtype=F64)
    n = torch.tensor([2.0, 2.0], dtype=F64)
    out = fedadp_weights(w, client_w, n, torch.zeros(2, dtype=F64), torch.tensor([1, 1]))
    assert torch.allclose(out.instantaneous_angle, torch.full((2,), math.pi / 2, dtype=F64))
    assert torch.allclose(out.weights, torch.tensor([0.5, 0.5], dtype=F64))


def test_identical_updates_clamp_cosine() -> None:
    # identical float32 directions can give cos = 1 + eps; the clamp keeps arccos finite
    w = torch.zeros(3)
    row = torch.tensor([0.1, 0.2, 0.3]) * 7.3
    client_w = torch.stack([-row, -row, -row])
    out = fedadp_weights(w, client_w, torch.tensor([1, 2, 3]), torch.zeros(3), torch.tensor([1, 1, 1]))
    assert torch.isfinite(out.instantaneous_angle).all()
    assert torch.allclose(out.instantaneous_angle, torch.zeros(3), atol=1e-3)
    assert torch.allclose(out.weights, torch.tensor([1 / 6, 2 / 6, 3 / 6]), atol=1e-6)


def test_one_client_and_degenerate_samples() -> None:
    one = torch.tensor([1])
    out = fedadp_weights(torch.zeros(2), torch.tensor([[1.0, 1.0]]), torch.tensor([4]), torch.zeros(1), one)
    assert torch.equal(out.weights, torch.tensor([1.0])) and out.degenerate is False
    client_w = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    out = fedadp_weights(torch.zeros(2), client_w, torch.tensor([0, 0]), torch.zeros(2), torch.tensor([1, 1]))
    assert torch.equal(out.weights, torch.tensor([0.5, 0.5])) and out.degenerate is True


def test_cosine_rows() -> None:
    a = torch.tensor([[3.0, 4.0], [0.0, 0.0], [-1.0, 0.0]], dtype=F64)
    cos = cosine_similarity_rows(a, torch.tensor([1.0, 0.0], dtype=F64))
    assert torch.allclose(cos, torch.tensor([0.6, 0.0, -1.0], dtype=F64))


def test_participation_validation() -> None:
    with pytest.raises(ValueError, match="participation_count must be >= 1"):
        fedadp_weights(torch.zeros(1), torch.zeros(1, 1), torch.ones(1), torch.zeros(1), torch.tensor([0]))
