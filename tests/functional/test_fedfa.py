"""Tests for FedFa weights and server momentum (SPEC section 3)."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fl.faults.validation import ConfigError
from lightning_fl.functional.fedfa import fedfa_weights, server_momentum_step

F64 = torch.float64
C = 1e-10


def _normalise(xs: list[float]) -> list[float]:
    return [x / sum(xs) for x in xs]


def test_weights_by_hand() -> None:
    # a = [0.2, 0.6, 0.2]; Iacc = -log2(a); f = [1, 2, 1] -> f' = [0.25, 0.5, 0.25]; If = -log2(1 - f')
    acc = torch.tensor([0.2, 0.6, 0.2], dtype=F64)
    iacc = _normalise([-math.log2(0.2), -math.log2(0.6), -math.log2(0.2)])
    i_f = _normalise([-math.log2(0.75), 1.0, -math.log2(0.75)])
    for alpha in (0.0, 0.3, 0.5, 1.0):
        w, degenerate = fedfa_weights(acc, torch.tensor([1, 2, 1]), alpha, 1.0 - alpha)
        expected = torch.tensor([alpha * a + (1 - alpha) * f for a, f in zip(iacc, i_f, strict=True)], dtype=F64)
        assert torch.allclose(w, expected, rtol=1e-14, atol=0)
        assert degenerate is False
        assert float(w.sum()) == pytest.approx(1.0, abs=1e-14)
    # more participation -> more weight (eq. 12 as written), lower accuracy -> more weight
    w, _ = fedfa_weights(acc, torch.tensor([1, 2, 1]), 0.0, 1.0)
    assert w[1] > w[0]
    w, _ = fedfa_weights(acc, torch.tensor([1, 2, 1]), 1.0, 0.0)
    assert w[1] < w[0]


def test_zero_accuracy_uses_c_only_there() -> None:
    # a = [0, 0.5, 0.5] -> Iacc = [-log2(1e-10), 1, 1]
    w, _ = fedfa_weights(torch.tensor([0.0, 0.4, 0.4], dtype=F64), torch.tensor([1, 1, 1]), 1.0, 0.0)
    expected = _normalise([-math.log2(C), 1.0, 1.0])
    assert torch.allclose(w, torch.tensor(expected, dtype=F64), rtol=1e-14, atol=0)


def test_all_zero_accuracies_are_uniform_not_nan() -> None:
    w, degenerate = fedfa_weights(torch.zeros(4), torch.tensor([1, 2, 3, 4]), 1.0, 0.0)
    assert torch.equal(w, torch.full((4,), 0.25)) and degenerate is True
    w, _ = fedfa_weights(torch.zeros(4), torch.tensor([1, 2, 3, 4]), 0.5, 0.5)
    assert torch.isfinite(w).all() and float(w.sum()) == pytest.approx(1.0)


def test_frequency_one_uses_c() -> None:
    # f = [0, 5] -> f' = [0, 1]: If = [-log2(1) = 0, -log2(0 + c)] -> normalised [0, 1]
    w, _ = fedfa_weights(torch.tensor([0.5, 0.5], dtype=F64), torch.tensor([0, 5]), 0.0, 1.0)
    assert torch.equal(w, torch.tensor([0.0, 1.0], dtype=F64))


def test_one_client_cohort() -> None:
    for alpha in (0.0, 0.5, 1.0):
        w, degenerate = fedfa_weights(torch.tensor([0.7]), torch.tensor([3]), alpha, 1.0 - alpha)
        assert torch.equal(w, torch.tensor([1.0])) and degenerate is False
    w, _ = fedfa_weights(torch.tensor([0.0]), torch.tensor([1]), 0.5, 0.5)
    assert torch.equal(w, torch.tensor([1.0]))


@pytest.mark.parametrize("alpha,beta", [(0.3, 0.5), (-0.1, 1.1), (1.2, -0.2), (float("nan"), 1.0), (0.5, 0.50001)])
def test_alpha_beta_validation(alpha: float, beta: float) -> None:
    with pytest.raises(ConfigError) as info:
        fedfa_weights(torch.ones(2), torch.ones(2), alpha, beta)
    message = str(info.value)
    assert "\n" not in message and "alpha" in message and "beta" in message


def test_alpha_beta_tolerance() -> None:
    w, _ = fedfa_weights(torch.tensor([0.5, 0.25], dtype=F64), torch.tensor([1, 1]), 0.5, 0.5 + 5e-7)
    assert torch.isfinite(w).all()


def test_momentum_reduces_to_aggregate_exactly() -> None:
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(7, generator=gen)
    agg = torch.randn(7, generator=gen)
    m = torch.randn(7, generator=gen)
    for form in ("heavy_ball", "ema"):
        new_w, new_m = server_momentum_step(w, agg, m, round_idx=4, gamma=0.0, form=form)
        assert torch.equal(new_w, agg)
        assert torch.equal(new_m, w - agg)


def test_momentum_by_hand() -> None:
    w, agg, m = torch.tensor([1.0], dtype=F64), torch.tensor([0.5], dtype=F64), torch.tensor([0.2], dtype=F64)
    # heavy ball: g = 0.5, m = 0.5 * 0.2 + 0.5 = 0.6, w = 1 - 0.6 = 0.4
    new_w, new_m = server_momentum_step(w, agg, m, 0)
    assert torch.allclose(new_m, torch.tensor([0.6], dtype=F64))
    assert torch.allclose(new_w, torch.tensor([0.4], dtype=F64))
    # ema: m = 0.1 + 0.5 * 0.5 = 0.35, w = 0.65
    new_w, new_m = server_momentum_step(w, agg, m, 0, form="ema")
    assert torch.allclose(new_m, torch.tensor([0.35], dtype=F64))
    assert torch.allclose(new_w, torch.tensor([0.65], dtype=F64))
    # eta_s = 2: w = 1 - 2 * 0.6 = -0.2
    new_w, _ = server_momentum_step(w, agg, m, 0, server_lr=2.0)
    assert torch.allclose(new_w, torch.tensor([-0.2], dtype=F64))
    # None buffer = zeros: m = g, w = agg
    new_w, new_m = server_momentum_step(w, agg, None, 0)
    assert torch.equal(new_m, torch.tensor([0.5], dtype=F64)) and torch.allclose(new_w, agg)


def test_momentum_period_reference_loop() -> None:
    # Python-float reference of SPEC 3 step 5 with b = 3: buffer every round, applied at t = 2, 5.
    gamma, lr, period = 0.5, 1.0, 3
    w = torch.tensor([0.0, 1.0], dtype=F64)
    m = None
    w_ref, m_ref = w.tolist(), [0.0, 0.0]
    for t in range(7):
        agg = w + torch.tensor([0.1 * (t + 1), -0.2], dtype=F64)  # the cohort moved by this much
        g = [wi - ai for wi, ai in zip(w_ref, agg.tolist(), strict=True)]
        m_ref = [gamma * mi + gi for mi, gi in zip(m_ref, g, strict=True)]
        w_ref = [wi - lr * mi for wi, mi in zip(w_ref, m_ref, strict=True)] if (t + 1) % period == 0 else agg.tolist()
        w, m = server_momentum_step(w, agg, m, t, gamma=gamma, server_lr=lr, period=period)
        assert torch.allclose(w, torch.tensor(w_ref, dtype=F64), rtol=0, atol=1e-14)
        assert torch.allclose(m, torch.tensor(m_ref, dtype=F64), rtol=0, atol=1e-14)
        if (t + 1) % period != 0:
            assert torch.equal(w, agg)  # rounds 0, 1, 3, 4, 6: plain aggregate


def test_arxiv_form_by_hand() -> None:
    # arXiv eqs. 5-7, descent sign: g = w^t - w_agg = 1 - 0.5 = 0.5; m = 0.5 * 0.2 + (1 - 0.5) * 0.5 = 0.35;
    # applied at the aggregate: w = w_agg - eta_s m = 0.5 - 0.35 = 0.15 (eta_s = 2: 0.5 - 0.7 = -0.2).
    w, agg, m = torch.tensor([1.0], dtype=F64), torch.tensor([0.5], dtype=F64), torch.tensor([0.2], dtype=F64)
    new_w, new_m = server_momentum_step(w, agg, m, 0, form="arxiv")
    assert torch.allclose(new_m, torch.tensor([0.35], dtype=F64), rtol=0, atol=1e-15)
    assert torch.allclose(new_w, torch.tensor([0.15], dtype=F64), rtol=0, atol=1e-15)
    new_w, _ = server_momentum_step(w, agg, m, 0, server_lr=2.0, form="arxiv")
    assert torch.allclose(new_w, torch.tensor([-0.2], dtype=F64), rtol=0, atol=1e-15)
    # Not an apply round (b = 2, t = 0): the buffer still moves, the model is the aggregate.
    new_w, new_m = server_momentum_step(w, agg, m, 0, period=2, form="arxiv")
    assert torch.equal(new_w, agg) and torch.allclose(new_m, torch.tensor([0.35], dtype=F64), rtol=0, atol=1e-15)
    # gamma_s = 0 does not reduce to the aggregate here: m = g = 0.5, w = 0.5 - 0.5 = 0 (one step further).
    new_w, _ = server_momentum_step(w, agg, None, 0, gamma=0.0, form="arxiv")
    assert torch.equal(new_w, torch.tensor([0.0], dtype=F64))


def test_per_period_first_period_by_hand() -> None:
    # b = 3, heavy_ball, gamma_s = 0.5, w^0 = 1. The cohort moves the model by +0.1, +0.2, +0.3:
    # t = 0: w_agg = 1.1 -> w^1 = 1.1, m stays 0;  t = 1: w_agg = 1.3 -> w^2 = 1.3, m stays 0;
    # t = 2 (apply): w_agg = 1.6, g = w^0 - w_agg = -0.6, m = 0.5 * 0 - 0.6 = -0.6, w^3 = w^2 - m = 1.9.
    # arxiv with gamma_s = 0.25 at t = 2: m = 0.75 * -0.6 = -0.45, w^3 = w_agg - m = 2.05.
    start = torch.tensor([1.0], dtype=F64)
    w, m = start, None
    for t, delta in enumerate((0.1, 0.2)):
        w, m = server_momentum_step(w, w + delta, m, t, period=3, period_mode="per_period", period_start=start)
        assert torch.equal(m, torch.zeros(1, dtype=F64))
    assert torch.allclose(w, torch.tensor([1.3], dtype=F64), rtol=0, atol=1e-15)
    new_w, new_m = server_momentum_step(w, w + 0.3, m, 2, period=3, period_mode="per_period", period_start=start)
    assert torch.allclose(new_m, torch.tensor([-0.6], dtype=F64), rtol=0, atol=1e-15)
    assert torch.allclose(new_w, torch.tensor([1.9], dtype=F64), rtol=0, atol=1e-15)
    new_w, new_m = server_momentum_step(w, w + 0.3, m, 2, gamma=0.25, period=3, form="arxiv",
                                        period_mode="per_period", period_start=start)
    assert torch.allclose(new_m, torch.tensor([-0.45], dtype=F64), rtol=0, atol=1e-15)
    assert torch.allclose(new_w, torch.tensor([2.05], dtype=F64), rtol=0, atol=1e-15)


@pytest.mark.parametrize("form", ["heavy_ball", "ema", "arxiv"])
def test_per_period_reference_loop(form: str) -> None:
    # Python-float reference of step 5 (docs/algorithms.md, FedFa) with period_mode per_period and b = 3:
    # the period starts at t = 0, 3, 6; the buffer moves only at t = 2, 5 with g = w^{t+1-b} - w_agg.
    gamma, lr, period = 0.6, 0.8, 3
    w, m = torch.tensor([0.0, 1.0], dtype=F64), None
    w_ref, m_ref, start_ref = w.tolist(), [0.0, 0.0], None
    for t in range(7):
        if t % period == 0:
            start_ref = list(w_ref)
        agg = w + torch.tensor([0.1 * (t + 1), -0.2], dtype=F64)
        if (t + 1) % period == 0:
            g = [s - a for s, a in zip(start_ref, agg.tolist(), strict=True)]
            m_ref = [gamma * mi + (gi if form == "heavy_ball" else (1 - gamma) * gi) for mi, gi in zip(m_ref, g)]
            base = agg.tolist() if form == "arxiv" else w_ref
            w_ref = [b - lr * mi for b, mi in zip(base, m_ref, strict=True)]
        else:
            w_ref = agg.tolist()
        w, m = server_momentum_step(w, agg, m, t, gamma=gamma, server_lr=lr, period=period, form=form,
                                    period_mode="per_period", period_start=torch.tensor(start_ref, dtype=F64))
        assert torch.allclose(w, torch.tensor(w_ref, dtype=F64), rtol=0, atol=1e-14)
        assert torch.allclose(m, torch.tensor(m_ref, dtype=F64), rtol=0, atol=1e-14)


@pytest.mark.parametrize("form", ["heavy_ball", "ema", "arxiv"])
def test_per_period_with_period_one_is_every_round_bitwise(form: str) -> None:
    gen = torch.Generator().manual_seed(5)
    w_a = w_b = torch.randn(6, generator=gen)
    m_a = m_b = None
    for t in range(4):
        agg = w_a + 0.1 * torch.randn(6, generator=gen)
        w_a, m_a = server_momentum_step(w_a, agg, m_a, t, gamma=0.7, form=form)
        w_b, m_b = server_momentum_step(w_b, agg, m_b, t, gamma=0.7, form=form, period_mode="per_period",
                                        period_start=w_b.clone())
        assert torch.equal(w_a, w_b) and torch.equal(m_a, m_b)


def test_momentum_validation() -> None:
    w = torch.zeros(1)
    with pytest.raises(ValueError, match="^form must be one of heavy_ball, ema, arxiv; got 'nesterov'$"):
        server_momentum_step(w, w, None, 0, form="nesterov")
    with pytest.raises(ValueError, match="^period_mode must be one of every_round, per_period; got 'each'$"):
        server_momentum_step(w, w, None, 0, period_mode="each")
    with pytest.raises(ValueError, match="period_mode per_period needs period_start"):
        server_momentum_step(w, w, None, 0, period_mode="per_period")
    with pytest.raises(ValueError, match="period must be an integer >= 1"):
        server_momentum_step(w, w, None, 0, period=0)
    with pytest.raises(ValueError, match="round_idx must be >= 0"):
        server_momentum_step(w, w, None, -1)
