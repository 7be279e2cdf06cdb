"""Tests for the q-FFL server step (SPEC section 2)."""

from __future__ import annotations

import pytest
import torch

from lightning_fl.functional.qffl import qffl_step

F64 = torch.float64


def _literal(
    global_w: torch.Tensor, client_w: torch.Tensor, loss: torch.Tensor, lr: float, q: float
) -> torch.Tensor:
    """SPEC 2 written out literally (no rescaling), in float64."""
    big_l = 1.0 / lr
    f = loss.to(F64) + 1e-10
    num = torch.zeros_like(global_w, dtype=F64)
    den = 0.0
    for k in range(client_w.shape[0]):
        dw = big_l * (global_w.to(F64) - client_w[k].to(F64))
        num += f[k] ** q * dw
        den += float(q * f[k] ** (q - 1) * dw.pow(2).sum() + big_l * f[k] ** q)
    return global_w.to(F64) - num / den


def test_q_one_by_hand() -> None:
    # L = 2; dw1 = [-2, 0], dw2 = [0, -4]; F ~ [1, 3]
    # D = [-2, 0] + [0, -12]; h1 = 4 + 2 = 6, h2 = 16 + 6 = 22; w = -[-2, -12] / 28 = [1/14, 3/7]
    out = qffl_step(
        torch.zeros(2, dtype=F64),
        torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=F64),
        torch.tensor([1.0, 3.0], dtype=F64),
        lr=0.5,
    )
    assert torch.allclose(out, torch.tensor([1 / 14, 3 / 7], dtype=F64), rtol=1e-9, atol=0)


def test_q_zero_is_unweighted_average() -> None:
    # q = 0: D_k = dw_k, h_k = L, so w - sum L (w - y_k) / (K L) = mean_k y_k, whatever the losses.
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(4, generator=gen, dtype=F64)
    client_w = torch.randn(3, 4, generator=gen, dtype=F64)
    out = qffl_step(w, client_w, torch.tensor([0.1, 5.0, 2.0], dtype=F64), lr=0.03, q=0.0)
    assert torch.allclose(out, client_w.mean(dim=0), rtol=0, atol=1e-13)


@pytest.mark.parametrize("q", [0.5, 1.0, 2.0, 5.0])
def test_matches_literal_formula(q: float) -> None:
    gen = torch.Generator().manual_seed(2)
    w = torch.randn(6, generator=gen, dtype=F64)
    client_w = w + 0.1 * torch.randn(4, 6, generator=gen, dtype=F64)
    loss = torch.tensor([0.3, 1.2, 2.5, 0.0], dtype=F64)
    expected = _literal(w, client_w, loss, 0.1, q)
    assert torch.allclose(qffl_step(w, client_w, loss, 0.1, q), expected, rtol=1e-12, atol=1e-14)


def test_large_losses_do_not_overflow_fp32() -> None:
    # F^q = 100^30 = 1e60 overflows float32; the rescaled form stays finite and correct.
    w = torch.zeros(3)
    client_w = torch.tensor([[0.1, 0.0, -0.2], [0.0, 0.3, 0.1]])
    loss = torch.tensor([100.0, 50.0])
    out = qffl_step(w, client_w, loss, lr=0.1, q=30.0)
    assert torch.isfinite(out).all()
    expected = _literal(w, client_w, loss, 0.1, 30.0)
    assert torch.allclose(out.to(F64), expected, rtol=1e-5, atol=1e-7)


def test_zero_loss_and_no_movement_are_finite() -> None:
    w = torch.ones(2, dtype=F64)
    out = qffl_step(w, torch.stack([w, w]), torch.zeros(2, dtype=F64), lr=0.1, q=1.0)
    assert torch.equal(out, w)


def test_one_client_cohort() -> None:
    # K = 1, q = 1: w - F dw / (||dw||^2 + L F); with tiny updates this is ~ y (here exact formula)
    w = torch.zeros(1, dtype=F64)
    y = torch.tensor([[0.5]], dtype=F64)
    out = qffl_step(w, y, torch.tensor([2.0], dtype=F64), lr=1.0, q=1.0)
    f = 2.0 + 1e-10
    assert float(out) == pytest.approx(-(f * -0.5) / (0.25 + f), rel=1e-12)


def test_validation() -> None:
    with pytest.raises(ValueError, match="lr must be > 0"):
        qffl_step(torch.zeros(1), torch.zeros(1, 1), torch.zeros(1), lr=0.0)
    with pytest.raises(ValueError, match="q must be >= 0"):
        qffl_step(torch.zeros(1), torch.zeros(1, 1), torch.zeros(1), lr=0.1, q=-1.0)
