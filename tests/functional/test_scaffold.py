"""Tests for SCAFFOLD option II (SPEC section 2)."""

from __future__ import annotations

import pytest
import torch

from lightning_fl.functional.scaffold import (
    scaffold_client_control,
    scaffold_correct_grad,
    scaffold_server_step,
)

F64 = torch.float64


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def test_correct_grad_single_and_cohort() -> None:
    # g - c_k + c = [1, 2] - [0.5, 0.5] + [0.25, -1] = [0.75, 0.5]
    assert torch.equal(scaffold_correct_grad(t(1.0, 2.0), t(0.5, 0.5), t(0.25, -1.0)), t(0.75, 0.5))
    grad = torch.arange(12, dtype=F64).reshape(3, 2, 2)
    c_k = torch.ones(3, 2, 2, dtype=F64)
    c = torch.full((2, 2), 0.5, dtype=F64)
    out = scaffold_correct_grad(grad, c_k, c)
    for k in range(3):
        assert torch.equal(out[k], grad[k] - c_k[k] + c)


def test_client_control_by_hand() -> None:
    # (w - y) / (tau lr) = [0.2, -0.2] / 0.4 = [0.5, -0.5]
    # c_k+ = [0.1, 0.2] - [0.05, -0.05] + [0.5, -0.5] = [0.55, -0.25]
    out = scaffold_client_control(t(0.1, 0.2), t(0.05, -0.05), t(1.0, 1.0), t(0.8, 1.2), 4, 0.1)
    assert torch.allclose(out, t(0.55, -0.25), rtol=0, atol=1e-15)


def test_client_control_cohort_and_zero_steps() -> None:
    c_k = t(1.0, 2.0, 3.0).reshape(3, 1).expand(3, 2).clone()
    c = t(0.5, 0.5)
    w = t(1.0, 1.0)
    y = torch.stack([t(0.0, 1.0), t(1.0, 0.0), w])  # last client took no step: y == w
    steps = torch.tensor([2, 5, 0])
    out = scaffold_client_control(c_k, c, w, y, steps, lr=0.5)
    assert torch.allclose(out[0], c_k[0] - c + t(1.0, 0.0) / 1.0)  # 2 steps * 0.5
    assert torch.allclose(out[1], c_k[1] - c + t(0.0, 1.0) / 2.5)
    assert torch.equal(out[2], c_k[2])  # tau_k = 0 keeps the old control, no 0/0
    assert torch.isfinite(out).all()


def test_option_two_recovers_a_constant_gradient() -> None:
    # tau SGD steps with the corrected gradient g - c_k + c move w by -tau lr (g - c_k + c), so
    # option II gives c_k+ = c_k - c + (g - c_k + c) = g: the client's true (constant) gradient.
    g, c_k, c, lr, tau = t(0.3, -1.2), t(0.1, 0.4), t(-0.2, 0.05), 0.05, 7
    w = t(2.0, -1.0)
    y = w.clone()
    for _ in range(tau):
        y = y - lr * scaffold_correct_grad(g, c_k, c)
    assert torch.allclose(scaffold_client_control(c_k, c, w, y, tau, lr), g, rtol=0, atol=1e-12)


def test_server_step_by_hand() -> None:
    # mean(y - w) = [2, 3]; c + [2, 4] / 4 = [1.5, 2]
    client_w = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=F64)
    w, c = scaffold_server_step(t(0.0, 0.0), client_w, t(1.0, 1.0), t(2.0, 4.0), 4)
    assert torch.equal(w, t(2.0, 3.0)) and torch.equal(c, t(1.5, 2.0))
    w, _ = scaffold_server_step(t(0.0, 0.0), client_w, t(1.0, 1.0), t(2.0, 4.0), 4, server_lr=0.5)
    assert torch.equal(w, t(1.0, 1.5))


def test_server_step_accepts_per_client_deltas() -> None:
    client_w = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=F64)
    per_client = torch.tensor([[1.0, 1.0], [1.0, 3.0]], dtype=F64)
    _, c_sum = scaffold_server_step(t(0.0, 0.0), client_w, t(0.0, 0.0), per_client.sum(0), 10)
    _, c_rows = scaffold_server_step(t(0.0, 0.0), client_w, t(0.0, 0.0), per_client, 10)
    assert torch.equal(c_sum, c_rows) and torch.equal(c_rows, t(0.2, 0.4))


def test_one_client_cohort() -> None:
    w, c = scaffold_server_step(t(1.0), torch.tensor([[3.0]], dtype=F64), t(0.0), t(6.0), 3)
    assert torch.equal(w, t(3.0)) and torch.equal(c, t(2.0))


def test_validation() -> None:
    with pytest.raises(ValueError, match="lr must be > 0"):
        scaffold_client_control(t(0.0), t(0.0), t(0.0), t(0.0), 1, 0.0)
    with pytest.raises(ValueError, match="num_clients_total must be >= 1"):
        scaffold_server_step(t(0.0), torch.zeros(1, 1, dtype=F64), t(0.0), t(0.0), 0)
