"""FedNova (SPEC 2): hand-computed rounds with and without client momentum, degenerate cohorts, CLI."""

from __future__ import annotations

import warnings

import pytest
import torch
from lightning_fl.callbacks.fednova import FedNova

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
    cb, log = FedNova(), RecordingLogger()
    # Round 0, plain SGD: a = tau = [1, 4]; p = [1/4, 3/4]; d_k = (w - y_k) / a_k = [[1, 0], [1, -0.5]];
    # tau_eff = 1/4 + 3 = 3.25; w^1 = w - 3.25 [1, -0.375].
    sgd = fake_federation(vector_layout(2), momentum=0.0)
    w1 = aggregate(prepared(cb, sgd), sgd, 0, vec(0, 0),
                   make_update(0, [0, 1], [[-1, 0], [-4, 2]], [1, 3], [1, 4]), log)
    torch.testing.assert_close(w1, vec(-3.25, 1.21875))
    assert log.scalars[-1] == ({"server/tau_eff": 3.25}, 1)
    # Round 1, momentum 0.5: a_k = (tau - 0.5 (1 - 0.5^tau) / 0.5) / 0.5 = 2 (tau - 1 + 0.5^tau):
    # tau = 1 -> 1, tau = 4 -> 6.125. Deltas relative to w^1; p = [1/4, 3/4] again.
    heavy_ball = fake_federation(vector_layout(2), momentum=0.5)
    y = [[-3.25 - 1, 1.21875], [-3.25 - 4, 1.21875 + 2]]
    w2 = aggregate(cb, heavy_ball, 1, w1, make_update(1, [2, 3], y, [1, 3], [1, 4]), log)
    tau_eff = 0.25 * 1 + 0.75 * 6.125
    direction = [0.25 * 1 + 0.75 * 4 / 6.125, 0.75 * -2 / 6.125]
    torch.testing.assert_close(w2, vec(-3.25 - tau_eff * direction[0], 1.21875 - tau_eff * direction[1]))
    metrics, step = log.scalars[-1]
    assert step == 2 and metrics["server/tau_eff"] == pytest.approx(tau_eff)


def test_equal_steps_without_momentum_is_fedavg():
    # tau_k all equal and rho = 0: tau_eff sum p_k (w - y_k) / tau = sum p_k (w - y_k).
    fed = fake_federation(vector_layout(2))
    w = aggregate(prepared(FedNova(), fed), fed, 0, vec(1, 1), make_update(0, [0, 1], [[0, 2], [4, 0]], [3, 1], [5, 5]))
    torch.testing.assert_close(w, vec(1, 1.5))


def test_degenerate_cohorts():
    fed = fake_federation(vector_layout(2), momentum=0.9)
    # One client: tau_eff = a, w^1 = w - a (w - y) / a = y.
    one = aggregate(prepared(FedNova(), fed), fed, 0, vec(1, 2), make_update(0, [4], [[0, 3]], [7], [6]))
    torch.testing.assert_close(one, vec(0, 3))
    # All-equal deltas with equal steps: w^1 = y.
    same = aggregate(prepared(FedNova(), fed), fed, 0, vec(1, 2),
                     make_update(0, [0, 1], [[0, 3], [0, 3]], [2, 9], [3, 3]))
    torch.testing.assert_close(same, vec(0, 3))
    # A client with no local step contributes d_k = 0 but counts in p_k (it shrinks tau_eff).
    sgd = fake_federation(vector_layout(2))
    idle = aggregate(prepared(FedNova(), sgd), sgd, 0, vec(0, 0),
                     make_update(0, [0, 1], [[0, 0], [-2, 0]], [1, 1], [0, 2]))
    torch.testing.assert_close(idle, vec(-0.5, 0))  # a = [0, 2], tau_eff = 1, sum p d = [0.5, 0]
    # All sample counts zero: uniform p, warned once.
    cb = prepared(FedNova(), sgd)
    with pytest.warns(UserWarning, match="summed to 0"):
        w = aggregate(cb, sgd, 0, vec(0, 0), make_update(0, [0, 1], [[-2, 0], [0, -4]], [0, 0], [1, 1]))
    torch.testing.assert_close(w, vec(-1, -2))


def test_setup_checks_client_momentum():
    for momentum in (1.0, 1.5):
        with pytest.raises(ConfigError, match=r"optimizer.init_args.momentum must be in \[0, 1\) for FedNova"):
            prepared(FedNova(), fake_federation(momentum=momentum))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prepared(FedNova(), fake_federation(momentum=0.9))
    adam = fake_federation(optimizer=lambda p: torch.optim.Adam(p, lr=0.01))
    with pytest.warns(UserWarning, match=r"assumes SGD.*torch.optim.Adam"):
        prepared(FedNova(), adam)


def test_cli_run_with_momentum_logs_tau_eff(tiny, tmp_path):
    optimizer = {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.05, "momentum": 0.5}}
    assert run_with(tiny, {"class_path": "lightning_fl.callbacks.fednova.FedNova"}, **{"model.optimizer": optimizer}) == 0
    tau_eff = assert_server_scalar_logged(tmp_path, "server/tau_eff")
    # tiny: 2 local epochs of batch 10 on <= 80 samples: tau_k <= 16; with momentum 0.5, a_k < 2 tau_k.
    assert all(0 < t < 32 for t in tau_eff)
