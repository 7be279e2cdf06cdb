"""FedAdam / FedYogi / FedAdagrad (SPEC 2): hand-computed rounds, degenerate cohorts, resume, CLI."""

from __future__ import annotations

import math

import pytest
import torch
from lightning_fl.callbacks.fedadaptive import (
    AdaptiveServerOptimizer,
    FedAdagrad,
    FedAdam,
    FedYogi,
)

from lightning_fl.faults.validation import ConfigError
from tests.callbacks.helpers import (
    RecordingLogger,
    aggregate,
    assert_server_scalar_logged,
    fake_federation,
    make_update,
    prepared,
    run_with,
    vec,
    vector_layout,
)

CLASSES = {"adam": FedAdam, "yogi": FedYogi, "adagrad": FedAdagrad}


def _sign(x: float) -> float:
    return (x > 0) - (x < 0)


def _reference(kind, w, averages, lr, beta1, beta2, tau):
    """Reddi et al. Alg. 2 per coordinate in plain Python floats, from m = 0, v = tau^2.

    ``averages`` are the FedAvg aggregates of the successive rounds; returns ``(w, m, v)`` after each.
    """
    w, m, v = list(w), [0.0] * len(w), [tau * tau] * len(w)
    out = []
    for avg in averages:
        for i in range(len(w)):
            d = avg[i] - w[i]
            m[i] = beta1 * m[i] + (1 - beta1) * d
            if kind == "adam":
                v[i] = beta2 * v[i] + (1 - beta2) * d * d
            elif kind == "yogi":
                v[i] = v[i] - (1 - beta2) * d * d * _sign(v[i] - d * d)
            else:
                v[i] = v[i] + d * d
            w[i] = w[i] + lr * m[i] / (math.sqrt(v[i]) + tau)
        out.append((list(w), list(m), list(v)))
    return out


@pytest.mark.parametrize("kind", ["adam", "yogi", "adagrad"])
def test_two_rounds_match_hand_computation(kind):
    hp = {"lr": 1.0, "beta1": 0.5, "beta2": 0.75, "tau": 0.5}
    fed, log = fake_federation(vector_layout(2)), RecordingLogger()
    cb = prepared(CLASSES[kind](**hp), fed)
    # Round 0: n = [1, 1], w_avg = [2, -2]; round 1: n = [1, 3], w_avg = [0.25, 1].
    rounds = [make_update(0, [0, 1], [[1, 0], [3, -4]], [1, 1]), make_update(1, [1, 2], [[1, 4], [0, 0]], [1, 3])]
    expected = _reference(kind, [0.0, 0.0], [[2.0, -2.0], [0.25, 1.0]], **hp)
    w = vec(0, 0)
    for t, update in enumerate(rounds):
        w = aggregate(cb, fed, t, w, update, log)
        exp_w, exp_m, exp_v = expected[t]
        torch.testing.assert_close(w, vec(*exp_w))
        torch.testing.assert_close(cb.server_optimizer.m, vec(*exp_m))
        torch.testing.assert_close(cb.server_optimizer.v, vec(*exp_v))
        metrics, step = log.scalars[-1]
        assert step == t + 1
        assert metrics["server/m_norm"] == pytest.approx(math.hypot(*exp_m), rel=1e-5)
        assert metrics["server/v_mean"] == pytest.approx(sum(exp_v) / 2, rel=1e-5)


def test_first_round_values_written_out():
    # Round 0 above by hand: D = [2, -2]; m = 0.5 D = [1, -1]; v0 = 0.25.
    # Adam v = 0.75 * 0.25 + 0.25 * 4 = 1.1875; Yogi v = 0.25 + 0.25 * 4 = 1.25 (sign(0.25 - 4) = -1);
    # Adagrad v = 0.25 + 4 = 4.25; w = m / (sqrt(v) + 0.5).
    for kind, v in (("adam", 1.1875), ("yogi", 1.25), ("adagrad", 4.25)):
        fed = fake_federation(vector_layout(2))
        cb = prepared(CLASSES[kind](lr=1.0, beta1=0.5, beta2=0.75, tau=0.5), fed)
        w = aggregate(cb, fed, 0, vec(0, 0), make_update(0, [0, 1], [[1, 0], [3, -4]], [1, 1]))
        step = 1 / (math.sqrt(v) + 0.5)
        torch.testing.assert_close(w, vec(step, -step))
        torch.testing.assert_close(cb.server_optimizer.v, vec(v, v))


def test_defaults_match_spec():
    for cls in CLASSES.values():
        cb = cls()
        assert (cb.lr, cb.beta1, cb.beta2, cb.tau) == (0.01, 0.9, 0.99, 1e-3)


@pytest.mark.parametrize("kind", ["adam", "yogi", "adagrad"])
def test_degenerate_cohorts(kind):
    fed = fake_federation(vector_layout(2))
    cls = CLASSES[kind]
    # One client and all-equal clients give the same step (w_avg = y).
    one = aggregate(prepared(cls(lr=0.1), fed), fed, 0, vec(1, 1), make_update(0, [5], [[2, 0]], [3]))
    equal = aggregate(prepared(cls(lr=0.1), fed), fed, 0, vec(1, 1),
                      make_update(0, [1, 4], [[2, 0], [2, 0]], [3, 9]))
    torch.testing.assert_close(one, equal)
    # No movement at all: D = 0, m stays 0, the model stays put (and stays finite).
    still = aggregate(prepared(cls(), fed), fed, 0, vec(1, 1), make_update(0, [0, 1], [[1, 1], [1, 1]]))
    torch.testing.assert_close(still, vec(1, 1))
    # All sample counts zero: uniform weights, warned once.
    zero = prepared(cls(lr=1.0, beta1=0.0, beta2=0.0, tau=1.0), fed)
    with pytest.warns(UserWarning, match="summed to 0"):
        w = aggregate(zero, fed, 0, vec(0, 0), make_update(0, [0, 1], [[2, 0], [0, 4]], [0, 0]))
    assert torch.isfinite(w).all() and w[0] > 0 and w[1] > 0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"lr": -0.01}, "lr must be a finite number > 0"),
    ({"beta1": 1.5}, "beta1 must be between 0.0 and 1.0"),
    ({"beta2": -0.5}, "beta2 must be between 0.0 and 1.0"),
    ({"tau": 0.0}, "tau must be a finite number > 0"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        FedYogi(**kwargs)


def test_base_class_is_not_an_algorithm():
    with pytest.raises(TypeError, match="FedAdam"):
        AdaptiveServerOptimizer()


@pytest.mark.parametrize("name", ["FedAdam", "FedYogi", "FedAdagrad"])
def test_cli_run_logs_moments(tiny, tmp_path, name):
    assert run_with(tiny, {"class_path": f"lightning_fl.callbacks.fedadaptive.{name}", "init_args": {"lr": 0.05}}) == 0
    assert_server_scalar_logged(tmp_path, "server/m_norm")
    assert_server_scalar_logged(tmp_path, "server/v_mean")


