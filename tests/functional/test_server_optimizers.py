"""Tests for FedAvgM and FedAdam / FedYogi / FedAdagrad (SPEC section 2)."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fl.functional.server_optimizers import (
    adaptive_server_step,
    fedavgm_step,
    init_adaptive_state,
)

F64 = torch.float64


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def test_fedavgm_two_rounds_by_hand() -> None:
    # Round 0: g = [1, 2] - [0.5, 2.5] = [0.5, -0.5]; v = g; w = w - v = [0.5, 2.5] (= FedAvg).
    w, v = fedavgm_step(t(1.0, 2.0), t(0.5, 2.5), None)
    assert torch.equal(w, t(0.5, 2.5)) and torch.equal(v, t(0.5, -0.5))
    # Round 1: g = [0.5, 2.5] - [0.25, 2.5] = [0.25, 0]; v = 0.9 [0.5, -0.5] + g = [0.7, -0.45];
    # w = [0.5 - 0.7, 2.5 + 0.45] = [-0.2, 2.95].
    w, v = fedavgm_step(w, t(0.25, 2.5), v)
    assert torch.allclose(v, t(0.7, -0.45), rtol=0, atol=1e-15)
    assert torch.allclose(w, t(-0.2, 2.95), rtol=0, atol=1e-15)


def test_fedavgm_server_lr_and_beta() -> None:
    # g = [2]; v = 0.5 * [4] + [2] = [4]; w = [3] - 0.25 * [4] = [2]
    w, v = fedavgm_step(t(3.0), t(1.0), t(4.0), beta=0.5, server_lr=0.25)
    assert torch.equal(v, t(4.0)) and torch.equal(w, t(2.0))


def test_fedavgm_does_not_mutate() -> None:
    w0, avg, vel = t(1.0, 2.0), t(0.0, 0.0), t(1.0, 1.0)
    fedavgm_step(w0, avg, vel)
    assert torch.equal(w0, t(1.0, 2.0)) and torch.equal(vel, t(1.0, 1.0))


def _reference_adaptive(
    kind: str, w: list[float], averages: list[list[float]], lr: float, b1: float, b2: float, tau: float
) -> list[float]:
    """Per-parameter Python-float loop of Reddi et al. Alg. 2 with m = 0, v = tau^2 initially."""
    m = [0.0] * len(w)
    v = [tau * tau] * len(w)
    w = list(w)
    for avg in averages:
        for i in range(len(w)):
            d = avg[i] - w[i]
            m[i] = b1 * m[i] + (1 - b1) * d
            if kind == "adam":
                v[i] = b2 * v[i] + (1 - b2) * d * d
            elif kind == "yogi":
                diff = v[i] - d * d
                sign = (diff > 0) - (diff < 0)
                v[i] = v[i] - (1 - b2) * d * d * sign
            else:
                v[i] = v[i] + d * d
            w[i] = w[i] + lr * m[i] / (math.sqrt(v[i]) + tau)
    return w


@pytest.mark.parametrize("kind", ["adam", "yogi", "adagrad"])
def test_adaptive_matches_reference_loop(kind: str) -> None:
    w0 = [0.5, -1.0, 0.0, 2.0]
    # client averages for 5 rounds; chosen so that Yogi sees both signs of v - D^2 and a D = 0
    averages = [
        [0.7, -1.5, 0.0, 2.0],
        [0.2, -1.4, 0.1, 2.5],
        [0.25, -1.0, 0.05, 2.4],
        [0.3, -0.2, 0.0, 2.4],
        [0.1, -0.3, -0.5, 3.0],
    ]
    lr, b1, b2, tau = 0.1, 0.9, 0.99, 1e-3
    expected = _reference_adaptive(kind, w0, averages, lr, b1, b2, tau)
    w, m, v = torch.tensor(w0, dtype=F64), None, None
    for avg in averages:
        w, m, v = adaptive_server_step(w, torch.tensor(avg, dtype=F64), m, v, kind, lr, b1, b2, tau)
    assert torch.allclose(w, torch.tensor(expected, dtype=F64), rtol=0, atol=1e-13)


def test_adam_first_step_by_hand() -> None:
    # D = 1; m = 0.1; v = 0.99 * 1e-6 + 0.01 = 0.01000099; w = 0.01 * 0.1 / (sqrt(v) + 1e-3)
    step = adaptive_server_step(t(0.0), t(1.0), None, None, "adam")
    assert torch.allclose(step.m, t(0.1), rtol=0, atol=1e-16)
    assert torch.allclose(step.v, t(0.01000099), rtol=0, atol=1e-16)
    expected = 0.01 * 0.1 / (math.sqrt(0.01000099) + 1e-3)
    assert math.isclose(float(step.new_w), expected, rel_tol=1e-14)


def test_yogi_sign_cases() -> None:
    # v > D^2 -> v decreases by (1 - b2) D^2; v == D^2 -> unchanged (sign 0); v < D^2 -> increases.
    m0 = torch.zeros(3, dtype=F64)
    v0 = t(5.0, 4.0, 1.0)
    step = adaptive_server_step(torch.zeros(3, dtype=F64), t(1.0, 2.0, 2.0), m0, v0, "yogi", beta2=0.5)
    assert torch.equal(step.v, t(5.0 - 0.5 * 1.0, 4.0, 1.0 + 0.5 * 4.0))


def test_adagrad_accumulates() -> None:
    step = adaptive_server_step(t(0.0), t(2.0), t(0.0), t(1.0), "adagrad")
    assert torch.equal(step.v, t(5.0))  # 1 + 2^2


def test_initial_state_is_reddi_tau_squared() -> None:
    m, v = init_adaptive_state(torch.zeros(3), tau=0.1)
    assert torch.equal(m, torch.zeros(3)) and torch.allclose(v, torch.full((3,), 0.01))
    explicit = adaptive_server_step(t(1.0), t(2.0), t(0.0), t(1e-6), "adam")
    implicit = adaptive_server_step(t(1.0), t(2.0), None, None, "adam")
    for a, b in zip(explicit, implicit, strict=True):
        assert torch.equal(a, b)


def test_zero_initial_v_is_finite() -> None:
    # Some libraries start v at 0; a D = 0 coordinate then gives 0 / (0 + tau) = 0, not NaN.
    step = adaptive_server_step(t(1.0, 1.0), t(1.0, 3.0), t(0.0, 0.0), t(0.0, 0.0), "yogi")
    assert torch.isfinite(step.new_w).all() and step.new_w[0] == 1.0


def test_adaptive_validation() -> None:
    with pytest.raises(ValueError, match="^kind must be one of adam, yogi, adagrad; got 'sgd'$"):
        adaptive_server_step(t(0.0), t(1.0), None, None, "sgd")
    with pytest.raises(ValueError, match="tau must be > 0"):
        adaptive_server_step(t(0.0), t(1.0), None, None, "adam", tau=0.0)


def test_adaptive_does_not_mutate() -> None:
    m, v = t(0.5), t(0.25)
    adaptive_server_step(t(0.0), t(1.0), m, v, "adam")
    assert torch.equal(m, t(0.5)) and torch.equal(v, t(0.25))
