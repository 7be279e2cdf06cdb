"""FedAvgM (SPEC 2): hand-computed rounds, degenerate cohorts, resume, CLI."""

from __future__ import annotations

import math

import pytest
import torch
from lightning_fl.callbacks.fedavgm import FedAvgM

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


def test_two_rounds_match_hand_computation():
    fed, log = fake_federation(vector_layout(2)), RecordingLogger()
    cb = prepared(FedAvgM(beta=0.9, server_lr=0.5), fed)
    # Round 0: w_avg = (1 [0, 2] + 3 [2, -2]) / 4 = [1.5, -1]; g = w - w_avg = [-0.5, 3]; v = g.
    w1 = aggregate(cb, fed, 0, vec(1, 2), make_update(0, [0, 2], [[0, 2], [2, -2]], [1, 3]), log)
    torch.testing.assert_close(w1, vec(1.25, 0.5))  # w - 0.5 v
    torch.testing.assert_close(cb.server_optimizer.velocity, vec(-0.5, 3))
    # Round 1: w_avg = [0.75, 1]; g = [0.5, -0.5]; v = 0.9 [-0.5, 3] + g = [0.05, 2.2].
    w2 = aggregate(cb, fed, 1, w1, make_update(1, [1, 3], [[1.25, 0.5], [0.25, 1.5]], [2, 2]), log)
    torch.testing.assert_close(cb.server_optimizer.velocity, vec(0.05, 2.2))
    torch.testing.assert_close(w2, vec(1.225, -0.6))
    (metrics, step), = log.scalars[-1:]
    assert step == 2  # round index 1 describes the model after 2 rounds
    assert metrics["server/velocity_norm"] == pytest.approx(math.hypot(0.05, 2.2), rel=1e-5)


def test_beta_zero_and_unit_lr_is_fedavg():
    fed = fake_federation(vector_layout(2))
    cb = prepared(FedAvgM(beta=0.0), fed)
    update = make_update(0, [0, 1], [[0, 2], [2, -2]], [1, 3])
    w = aggregate(cb, fed, 0, vec(1, 2), update)
    w = aggregate(cb, fed, 1, w, update)
    torch.testing.assert_close(w, vec(1.5, -1))


def test_degenerate_cohorts():
    fed = fake_federation(vector_layout(2))
    # One client: w_avg = y, v = w - y, w^1 = y.
    one = prepared(FedAvgM(), fed)
    torch.testing.assert_close(aggregate(one, fed, 0, vec(1, 2), make_update(0, [3], [[3, 4]], [5])), vec(3, 4))
    # All clients equal: the same as one client; momentum still carries v into the next round.
    same = prepared(FedAvgM(), fed)
    w = aggregate(same, fed, 0, vec(1, 2), make_update(0, [0, 1], [[3, 4], [3, 4]], [1, 7]))
    torch.testing.assert_close(w, vec(3, 4))
    w = aggregate(same, fed, 1, w, make_update(1, [0, 1], [[3, 4], [3, 4]], [1, 7]))
    torch.testing.assert_close(w, vec(3 + 0.9 * 2, 4 + 0.9 * 2))  # g = 0, v = 0.9 [-2, -2]
    # All sample counts zero: uniform weights, warned once.
    zero = prepared(FedAvgM(beta=0.0), fed)
    with pytest.warns(UserWarning, match="summed to 0"):
        w = aggregate(zero, fed, 0, vec(0, 0), make_update(0, [0, 1], [[2, 0], [0, 4]], [0, 0]))
    torch.testing.assert_close(w, vec(1, 2))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"beta": -0.1}, "beta must be between 0.0 and 1.0"),
    ({"server_lr": 0.0}, "server_lr must be a finite number > 0"),
    ({"weighting": "equal"}, "weighting must be one of samples, uniform"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        FedAvgM(**kwargs)


def test_cli_run_logs_velocity_norm(tiny, tmp_path):
    assert run_with(tiny, {"class_path": "lightning_fl.callbacks.fedavgm.FedAvgM", "init_args": {"beta": 0.9}}) == 0
    assert_server_scalar_logged(tmp_path, "server/velocity_norm")
