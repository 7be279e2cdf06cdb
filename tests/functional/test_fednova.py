"""Tests for FedNova (SPEC section 2)."""

from __future__ import annotations

import pytest
import torch

from lightning_fl.functional.fednova import fednova_normalizer, fednova_step
from lightning_fl.functional.weights import fedavg_weights, weighted_average

F64 = torch.float64


def test_normalizer_plain_sgd_is_tau() -> None:
    steps = torch.tensor([0, 1, 5, 40])
    a = fednova_normalizer(steps)
    assert torch.equal(a, steps.to(F64))
    assert fednova_normalizer(torch.tensor([3.0])).dtype == torch.float32


def test_normalizer_momentum_by_hand_and_reference() -> None:
    # rho = 0.5: tau=1 -> 1; tau=2 -> (2 - 0.5 * 0.75 / 0.5) / 0.5 = 2.5; tau=3 -> (3 - 0.875) / 0.5 = 4.25
    a = fednova_normalizer(torch.tensor([1, 2, 3]), momentum=0.5)
    assert torch.allclose(a, torch.tensor([1.0, 2.5, 4.25], dtype=F64), rtol=0, atol=1e-15)
    # reference: sum of heavy-ball step weights, sum_{i=1..tau} (1 - rho^i) / (1 - rho)
    for rho in (0.1, 0.9, 0.99):
        for tau in (1, 4, 17):
            ref = sum((1 - rho**i) / (1 - rho) for i in range(1, tau + 1))
            got = float(fednova_normalizer(torch.tensor([tau]), rho))
            assert got == pytest.approx(ref, rel=1e-12)


def test_normalizer_matches_torch_sgd_momentum() -> None:
    # With a constant gradient g, torch.optim.SGD(momentum=rho) moves w by lr * g * a_k after tau steps.
    rho, lr, tau = 0.9, 0.1, 6
    p = torch.nn.Parameter(torch.zeros(1, dtype=F64))
    opt = torch.optim.SGD([p], lr=lr, momentum=rho)
    for _ in range(tau):
        opt.zero_grad()
        (2.0 * p).sum().backward()  # g = 2
        opt.step()
    a = float(fednova_normalizer(torch.tensor([tau]), rho))
    assert -float(p.detach()) / (lr * 2.0) == pytest.approx(a, rel=1e-12)


def test_step_by_hand_rho_zero() -> None:
    # p = [0.25, 0.75]; a = tau = [1, 4]; d1 = [1, 2] / 1, d2 = [4, 0] / 4 = [1, 0]
    # tau_eff = 0.25 + 3 = 3.25; sum p d = [1, 0.5]; w = -3.25 * [1, 0.5] = [-3.25, -1.625]
    client_w = torch.tensor([[-1.0, -2.0], [-4.0, 0.0]], dtype=F64)
    step = fednova_step(torch.zeros(2, dtype=F64), client_w, torch.tensor([1, 3]), torch.tensor([1, 4]))
    assert torch.equal(step.new_w, torch.tensor([-3.25, -1.625], dtype=F64))
    assert float(step.tau_eff) == 3.25 and step.degenerate is False


def test_step_equal_steps_is_fedavg() -> None:
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(5, generator=gen, dtype=F64)
    client_w = torch.randn(3, 5, generator=gen, dtype=F64)
    n = torch.tensor([10.0, 20.0, 70.0], dtype=F64)
    step = fednova_step(w, client_w, n, torch.tensor([8, 8, 8]))
    fedavg = weighted_average(client_w, fedavg_weights(n)[0])
    assert torch.allclose(step.new_w, fedavg, rtol=0, atol=1e-14)


def test_step_momentum_uses_normalizer() -> None:
    w = torch.zeros(1, dtype=F64)
    client_w = torch.tensor([[-2.5], [-1.0]], dtype=F64)
    # rho = 0.5, tau = [2, 1] -> a = [2.5, 1]; d = [1, 1]; p = [0.5, 0.5]; tau_eff = 1.75
    step = fednova_step(w, client_w, torch.tensor([1, 1]), torch.tensor([2, 1]), momentum=0.5)
    assert torch.allclose(step.new_w, torch.tensor([-1.75], dtype=F64), rtol=0, atol=1e-15)


def test_step_client_without_steps_and_degenerate_samples() -> None:
    w = torch.ones(2, dtype=F64)
    client_w = torch.stack([w - 1.0, w])  # second client did not move, tau = 0
    step = fednova_step(w, client_w, torch.tensor([0, 0]), torch.tensor([2, 0]))
    # p uniform (fallback); a = [2, 0]; d = [0.5, 0.5] and [0, 0]; tau_eff = 1; w - 1 * [0.25, 0.25]
    assert step.degenerate is True
    assert torch.equal(step.new_w, torch.tensor([0.75, 0.75], dtype=F64))


def test_one_client_cohort_returns_its_weights() -> None:
    y = torch.tensor([[3.0, -1.0]], dtype=F64)
    step = fednova_step(torch.zeros(2, dtype=F64), y, torch.tensor([9]), torch.tensor([5]))
    assert torch.allclose(step.new_w, torch.tensor([3.0, -1.0], dtype=F64), rtol=0, atol=1e-15)


def test_momentum_validation() -> None:
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\)"):
        fednova_normalizer(torch.tensor([1]), momentum=1.0)
