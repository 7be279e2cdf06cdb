"""FedAdp (SPEC 2): hand-computed rounds with smoothed angles, degenerate cohorts, resume, CLI."""

from __future__ import annotations

import math

import pytest
import torch
from lightning_fl.callbacks.fedadp import FedAdp

from lightning_fl.faults.validation import ConfigError
from tests.callbacks.helpers import (
    RecordingLogger,
    aggregate,
    assert_server_scalar_logged,
    events,
    fake_federation,
    make_update,
    prepared,
    run_with,
    vec,
    vector_layout,
)

FED = fake_federation(vector_layout(2))


def fedadp(**kwargs) -> FedAdp:
    return prepared(FedAdp(**kwargs), FED)


def smoothed_angles(cb: FedAdp) -> dict[int, float]:
    """Client id to the stored smoothed angle ``th_k``, for every client seen."""
    state = cb.smoothed_angle.state_dict()
    rows = [] if state["rows"] is None else state["rows"].tolist()
    return dict(zip(state["ids"].tolist(), rows))


def _angle(a, b):
    norm = math.hypot(*a) * math.hypot(*b)
    return math.pi / 2 if norm == 0 else math.acos(max(-1.0, min(1.0, (a[0] * b[0] + a[1] * b[1]) / norm)))


def _gompertz(theta, a=5.0):
    return a * (1 - math.exp(-math.exp(-a * (theta - 1))))


def _reference(w, ys, ns, previous, counts, a=5.0):
    """SPEC 2 in plain Python floats for d = 2: returns (w^{t+1}, smoothed angles)."""
    p = [n / sum(ns) for n in ns]
    gs = [[w[0] - y[0], w[1] - y[1]] for y in ys]
    g = [sum(pk * gk[i] for pk, gk in zip(p, gs)) for i in range(2)]
    smoothed = []
    for gk, prev, m in zip(gs, previous, counts):
        theta = _angle(gk, g)
        smoothed.append(theta if m == 1 else ((m - 1) * prev + theta) / m)
    raw = [n * math.exp(_gompertz(th, a)) for n, th in zip(ns, smoothed)]
    psi = [r / sum(raw) for r in raw]
    return [sum(pk * y[i] for pk, y in zip(psi, ys)) for i in range(2)], smoothed, psi


def test_two_rounds_with_smoothing_match_hand_computation():
    cb, log = fedadp(), RecordingLogger()
    # Round 0: g_0 = [1, 0], g_1 = [0, 1], p = [1/4, 3/4]: g = [0.25, 0.75]; theta_0 = arccos(0.25 / |g|) etc.
    ys0, ns0 = [[-1, 0], [0, -1]], [1, 3]
    w1 = aggregate(cb, FED, 0, vec(0, 0), make_update(0, [0, 1], ys0, ns0, participation=[1, 1]), log)
    exp_w1, th0, _ = _reference([0, 0], ys0, ns0, [0, 0], [1, 1])
    assert th0[0] == pytest.approx(math.acos(0.25 / math.sqrt(0.625)))
    torch.testing.assert_close(w1, vec(*exp_w1))
    assert smoothed_angles(cb)[0] == pytest.approx(th0[0], rel=1e-6)
    assert smoothed_angles(cb)[1] == pytest.approx(th0[1], rel=1e-6)
    # Round 1: client 1 again (m = 2: th = (th_prev + theta) / 2) and client 2 for the first time.
    ys1, ns1 = [[w1[0].item() + 0.5, w1[1].item() - 1.0], [w1[0].item() - 1.0, w1[1].item() - 1.0]], [2, 2]
    w2 = aggregate(cb, FED, 1, w1, make_update(1, [1, 2], ys1, ns1, participation=[2, 1]), log)
    exp_w2, th1, _ = _reference(w1.tolist(), ys1, ns1, [th0[1], 0.0], [2, 1])
    torch.testing.assert_close(w2, vec(*exp_w2))
    assert smoothed_angles(cb)[1] == pytest.approx(th1[0], rel=1e-6)
    assert smoothed_angles(cb)[2] == pytest.approx(th1[1], rel=1e-6)
    assert smoothed_angles(cb)[0] == pytest.approx(th0[0], rel=1e-6)  # absent this round: unchanged
    metrics, step = log.scalars[-1]
    assert step == 2
    assert metrics["server/smoothed_angle_mean"] == pytest.approx(sum(th1) / 2, rel=1e-6)


def test_degenerate_cohorts():
    # One client: psi = 1.
    one = aggregate(fedadp(), FED, 0, vec(0, 0), make_update(0, [2], [[3, 4]], [5]))
    torch.testing.assert_close(one, vec(3, 4))
    # All-equal deltas: every angle is 0, so psi = n_k / sum n (FedAvg) - here also equal to y.
    cb = fedadp()
    same = aggregate(cb, FED, 0, vec(0, 0), make_update(0, [0, 1], [[1, 1], [1, 1]], [1, 3]))
    torch.testing.assert_close(same, vec(1, 1))
    assert smoothed_angles(cb) == {0: 0.0, 1: 0.0}
    # Updates that cancel (g = 0): every angle is pi/2, psi = n_k / sum n.
    cancel = fedadp()
    w = aggregate(cancel, FED, 0, vec(0, 0), make_update(0, [0, 1], [[1, 0], [-1, 0]], [1, 1]))
    torch.testing.assert_close(w, vec(0, 0))
    assert smoothed_angles(cancel)[0] == pytest.approx(math.pi / 2)
    # All sample counts zero: uniform weights, warned once.
    zero = fedadp()
    with pytest.warns(UserWarning, match="summed to 0"):
        w = aggregate(zero, FED, 0, vec(0, 0), make_update(0, [0, 1], [[2, 0], [0, 2]], [0, 0]))
    assert torch.isfinite(w).all()


def test_client_with_earlier_participations_but_no_stored_angle_starts_afresh():
    # E.g. resumed from a FedAvg checkpoint: m_k = 3 but nothing to average with.
    ys, ns = [[-1, 0], [0, -1]], [1, 3]
    cb = fedadp()
    w = aggregate(cb, FED, 5, vec(0, 0), make_update(5, [0, 1], ys, ns, participation=[3, 1]))
    exp_w, th, _ = _reference([0, 0], ys, ns, [0, 0], [1, 1])
    torch.testing.assert_close(w, vec(*exp_w))
    assert smoothed_angles(cb)[0] == pytest.approx(th[0], rel=1e-6)


def test_bad_arguments():
    with pytest.raises(ConfigError, match="alpha must be a finite number >= 0"):
        FedAdp(alpha=-5.0)


def test_cli_run_logs_angles_and_weight_histogram(tiny, tmp_path):
    assert run_with(tiny, {"class_path": "lightning_fl.callbacks.fedadp.FedAdp", "init_args": {"alpha": 5.0}}) == 0
    assert_server_scalar_logged(tmp_path, "server/smoothed_angle_mean")
    acc = events(tmp_path)
    assert {"server/weights", "server/smoothed_angle"} <= set(acc.Tags()["histograms"])
    assert [e.step for e in acc.Histograms("server/weights")] == [1, 2, 3, 4]
