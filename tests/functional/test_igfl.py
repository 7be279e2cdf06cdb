"""Tests for IGFL-C correction and IGFL-S attention aggregation (SPEC section 4)."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fl.functional.igfl import (
    attention_scores,
    igfl_attention_aggregate,
    igfl_client_correction,
    paired_similarity,
)

F64 = torch.float64


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def m(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


# ---------------------------------------------------------------- IGFL-C


def test_client_correction_by_hand() -> None:
    # D_G = ([-0.4, 0.2] - [2, 0] / 4) / 2 + [1, -1] / 4 = [-0.45, 0.1] + [0.25, -0.25]
    out = igfl_client_correction(t(-0.4, 0.2), t(2.0, 0.0), t(1.0, -1.0), 4, 2)
    assert torch.allclose(out, t(-0.2, -0.15), rtol=0, atol=1e-15)


def test_client_correction_cohort_matches_loop() -> None:
    gen = torch.Generator().manual_seed(4)
    step = torch.randn(3, 2, 5, generator=gen, dtype=F64)
    prev = torch.randn(3, 2, 5, generator=gen, dtype=F64)
    server = torch.randn(2, 5, generator=gen, dtype=F64)
    steps = torch.tensor([1, 7, 20])
    out = igfl_client_correction(step, prev, server, steps, cohort_size=10)
    for k in range(3):
        tk = int(steps[k])
        expected = (step[k] - prev[k] / tk) / 10 + server / tk
        assert torch.allclose(out[k], expected, rtol=0, atol=1e-15)


def test_client_correction_first_participation_and_round_zero() -> None:
    # prev delta zeros (first time) and dW_ps zeros (t = 0): D_G = D_I / K
    out = igfl_client_correction(t(0.3, -0.6), torch.zeros(2, dtype=F64), torch.zeros(2, dtype=F64), 5, 3)
    assert torch.allclose(out, t(0.1, -0.2), rtol=0, atol=1e-16)


def test_client_correction_validation() -> None:
    with pytest.raises(ValueError, match="num_steps must be >= 1"):
        igfl_client_correction(t(1.0), t(0.0), t(0.0), 0, 2)
    with pytest.raises(ValueError, match="cohort_size must be >= 1"):
        igfl_client_correction(t(1.0), t(0.0), t(0.0), 1, 0)


# ---------------------------------------------------------------- similarities


def test_attention_scores_kinds() -> None:
    q = m([[1.0, 2.0, 0.0, 0.0]])
    k = m([[3.0, 4.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [-1.0, 0.0, 0.0, 0.0]])
    assert torch.equal(attention_scores(q, k), m([[11.0, 0.0, -1.0]]))
    assert torch.equal(attention_scores(q, k, "scaled_dot"), m([[5.5, 0.0, -0.5]]))  # / sqrt(4)
    assert torch.equal(attention_scores(q, k, temperature=2.0), m([[5.5, 0.0, -0.5]]))
    cos = attention_scores(q, k, "cosine")
    expected = m([[11.0 / (math.sqrt(5) * 5.0), 0.0, -1.0 / math.sqrt(5)]])  # zero key -> 0, not NaN
    assert torch.allclose(cos, expected, rtol=1e-14, atol=0)
    assert torch.equal(attention_scores(torch.zeros(1, 4, dtype=F64), k, "cosine"), torch.zeros(1, 3, dtype=F64))


def test_paired_similarity() -> None:
    a = m([[1.0, 2.0], [0.0, 0.0], [1.0, 0.0]])
    b = m([[3.0, 4.0], [5.0, 5.0], [0.0, 2.0]])
    assert torch.equal(paired_similarity(a, b), t(11.0, 0.0, 0.0))
    assert torch.allclose(paired_similarity(a, b, "cosine"), t(11.0 / (math.sqrt(5) * 5), 0.0, 0.0))


# ---------------------------------------------------------------- IGFL-S


def _softmax(xs: list[float]) -> list[float]:
    top = max(xs)
    e = [math.exp(x - top) for x in xs]
    return [v / sum(e) for v in e]


def test_self_attention_by_hand_and_loop() -> None:
    # D1 = [2, 0], D2 = [0, 1]: dot scores [[4, 0], [0, 1]]
    w = t(1.0, 1.0)
    client_w = w + m([[2.0, 0.0], [0.0, 1.0]])
    new_w, att = igfl_attention_aggregate(w, client_w, mode="self")
    rows = [_softmax([4.0, 0.0]), _softmax([0.0, 1.0])]
    assert torch.allclose(att, m(rows), rtol=1e-14, atol=0)
    # literal (1/K) sum_i sum_j alpha_ij D_j
    deltas = [[2.0, 0.0], [0.0, 1.0]]
    expected = [1.0 + sum(rows[i][j] * deltas[j][c] for i in range(2) for j in range(2)) / 2 for c in range(2)]
    assert torch.allclose(new_w, t(*expected), rtol=1e-14, atol=0)


def test_global_attention_by_hand() -> None:
    # q = mean(D) = [1, 0.5]; scores = [2, 0.5]
    w = torch.zeros(2, dtype=F64)
    client_w = m([[2.0, 0.0], [0.0, 1.0]])
    new_w, att = igfl_attention_aggregate(w, client_w, mode="global")
    a = _softmax([2.0, 0.5])
    assert att.shape == (2,) and torch.allclose(att, t(*a), rtol=1e-14, atol=0)
    assert torch.allclose(new_w, t(2.0 * a[0], a[1]), rtol=1e-14, atol=0)


def test_time_attention_by_hand_and_first_timer() -> None:
    # prev = [[1, 0], [0, 0]] (client 2 is new): scores = [psi([1,0],[2,0]), psi(0, [0,1])] = [2, 0]
    w = torch.zeros(2, dtype=F64)
    client_w = m([[2.0, 0.0], [0.0, 1.0]])
    prev = m([[1.0, 0.0], [0.0, 0.0]])
    cases = (("dot", [2.0, 0.0]), ("cosine", [1.0, 0.0]), ("scaled_dot", [2.0 / math.sqrt(2), 0.0]))
    for similarity, scores in cases:
        new_w, att = igfl_attention_aggregate(w, client_w, prev, mode="time", similarity=similarity)
        a = _softmax(scores)
        assert torch.allclose(att, t(*a), rtol=1e-14, atol=0)
        assert torch.allclose(new_w, t(2.0 * a[0], a[1]), rtol=1e-14, atol=0)


def test_time_matrix_reading_by_hand() -> None:
    # Algorithm 3 literally: q_i = dW_i_prev = [[1, 1], [0, -1]] against D = [[2, 0], [0, 1]]:
    # scores q D^T = [[1*2 + 1*0, 1*0 + 1*1], [0*2 - 1*0, 0*0 - 1*1]] = [[2, 1], [0, -1]], softmax per row;
    # w^1 = w^0 + (1/K) sum_i sum_j A_ij D_j.
    w = t(0.5, -0.5)
    deltas = [[2.0, 0.0], [0.0, 1.0]]
    client_w = w + m(deltas)
    prev = m([[1.0, 1.0], [0.0, -1.0]])
    for temperature in (1.0, 2.0):
        rows = [_softmax([2.0 / temperature, 1.0 / temperature]), _softmax([0.0, -1.0 / temperature])]
        new_w, att = igfl_attention_aggregate(w, client_w, prev, mode="time", temperature=temperature,
                                              time_reading="matrix")
        assert att.shape == (2, 2) and torch.allclose(att, m(rows), rtol=1e-14, atol=0)
        expected = [[0.5, -0.5][c] + sum(rows[i][j] * deltas[j][c] for i in range(2) for j in range(2)) / 2
                    for c in range(2)]
        assert torch.allclose(new_w, t(*expected), rtol=1e-14, atol=0)
    # The default (cohort) reading scores each client against itself only: s = [2, -1], one softmax.
    new_w, att = igfl_attention_aggregate(w, client_w, prev, mode="time")
    a = _softmax([2.0, -1.0])
    assert torch.allclose(att, t(*a), rtol=1e-14, atol=0)
    assert torch.allclose(new_w, t(0.5 + 2.0 * a[0], -0.5 + a[1]), rtol=1e-14, atol=0)


def test_time_matrix_first_timer_row_is_uniform() -> None:
    # Client 1 is new (dW_prev = 0): its row scores 0 against every D_j, i.e. [1/2, 1/2], with every psi.
    client_w = m([[2.0, 0.0], [0.0, 1.0]])
    prev = m([[1.0, 0.0], [0.0, 0.0]])
    for similarity in ("dot", "scaled_dot", "cosine"):
        _, att = igfl_attention_aggregate(torch.zeros(2, dtype=F64), client_w, prev, mode="time",
                                          similarity=similarity, time_reading="matrix")
        assert torch.equal(att[1], t(0.5, 0.5))


def test_all_equal_deltas_give_uniform_attention() -> None:
    w = torch.zeros(3, dtype=F64)
    client_w = t(0.5, -1.0, 2.0).expand(4, 3).clone()
    new_w, att = igfl_attention_aggregate(w, client_w, mode="self")
    assert torch.allclose(att, torch.full((4, 4), 0.25, dtype=F64), rtol=0, atol=1e-15)
    assert torch.allclose(new_w, client_w[0], rtol=0, atol=1e-15)
    for mode in ("global", "time"):
        _, att = igfl_attention_aggregate(w, client_w, torch.zeros(4, 3, dtype=F64), mode=mode)
        assert torch.allclose(att, torch.full((4,), 0.25, dtype=F64), rtol=0, atol=1e-15)


def test_huge_deltas_are_stable() -> None:
    # float32 dot products of ~1e6-sized deltas are ~1e12: softmax must subtract the max
    w = torch.zeros(8)
    client_w = torch.stack([torch.full((8,), 1e6), torch.full((8,), -1e6), torch.full((8,), 3e5)])
    for mode in ("self", "global", "time"):
        new_w, att = igfl_attention_aggregate(w, client_w, client_w.clone(), mode=mode)
        assert torch.isfinite(new_w).all() and torch.isfinite(att).all()
        assert torch.allclose(att.sum(dim=-1), torch.ones(att.shape[:-1]))


def test_zero_delta_cosine_is_not_nan() -> None:
    w = torch.ones(2)
    client_w = torch.stack([w, w + torch.tensor([1.0, 0.0])])  # client 0 did not move
    for mode in ("self", "global", "time"):
        new_w, att = igfl_attention_aggregate(w, client_w, torch.zeros(2, 2), mode=mode, similarity="cosine")
        assert torch.isfinite(new_w).all() and torch.isfinite(att).all()


def test_one_client_and_high_temperature() -> None:
    w = torch.zeros(2, dtype=F64)
    y = m([[1.0, -2.0]])
    for mode in ("self", "global", "time"):
        new_w, att = igfl_attention_aggregate(w, y, torch.zeros(1, 2, dtype=F64), mode=mode)
        assert torch.equal(new_w, y[0]) and torch.equal(att.reshape(-1), t(1.0))
    # temperature -> infinity: uniform attention, i.e. the plain mean of the cohort
    client_w = m([[1.0, 0.0], [0.0, 3.0], [2.0, 2.0]])
    new_w, _ = igfl_attention_aggregate(w, client_w, mode="self", temperature=1e12)
    assert torch.allclose(new_w, client_w.mean(0), rtol=0, atol=1e-9)


def test_aggregate_validation() -> None:
    w, y = torch.zeros(2), torch.zeros(2, 2)
    with pytest.raises(ValueError, match="^mode must be one of self, global, time; got 'foo'$"):
        igfl_attention_aggregate(w, y, mode="foo")
    with pytest.raises(ValueError, match="^similarity must be one of dot, scaled_dot, cosine; got 'l2'$"):
        igfl_attention_aggregate(w, y, similarity="l2")
    with pytest.raises(ValueError, match="needs prev_deltas"):
        igfl_attention_aggregate(w, y, mode="time")
    with pytest.raises(ValueError, match="temperature must be"):
        igfl_attention_aggregate(w, y, temperature=0.0)
    with pytest.raises(ValueError, match="^time_reading must be one of cohort, matrix; got 'rows'$"):
        igfl_attention_aggregate(w, y, torch.zeros(2, 2), mode="time", time_reading="rows")
