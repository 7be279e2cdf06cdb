"""q-FFL (SPEC 2): hand-computed rounds, degenerate cohorts, the optimizer check, CLI."""

from __future__ import annotations

import pytest
import torch
from lightning_fl.callbacks.qffl import QFFL

from lightning_fl.engines.hooks import ClientHookSet
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


def _federation(lr: float = 0.1):
    return fake_federation(vector_layout(2), lr=lr)


def _aggregate(cb, federation, round_idx, global_w, update, log=None):
    return aggregate(prepared(cb, federation), federation, round_idx, global_w, update, log)
from tests.conftest import run_cli


def test_rounds_match_hand_computation():
    fed, log = _federation(lr=0.5), RecordingLogger()  # L = 2
    update = make_update(0, [0, 1], [[1, 0], [0, -1]], loss_before=[1.0, 3.0])
    # dw = 2 (w - y) = [[-2, 0], [0, 2]], ||dw||^2 = [4, 4].
    # q = 1: D = F dw = [[-2, 0], [0, 6]]; h = ||dw||^2 + L F = [6, 10]; w^1 = -[-2, 6] / 16.
    w1 = _aggregate(QFFL(q=1.0), fed, 0, vec(0, 0), update, log)
    torch.testing.assert_close(w1, vec(0.125, -0.375))
    metrics, step = log.scalars[-1]
    assert step == 1
    assert metrics["server/loss_before_mean"] == pytest.approx(2.0)
    assert metrics["server/update_norm"] == pytest.approx(float(vec(0.125, -0.375).norm()))
    # Second round from w^1 with q = 2: F^2 = [1, 9]; D = [[-2, 0], [0, 18]];
    # h = 2 F ||dw||^2 + L F^2 = [8 + 2, 24 + 18] = [10, 42].
    y = [[0.125 + 1, -0.375], [0.125, -0.375 - 1]]
    w2 = _aggregate(QFFL(q=2.0), fed, 1, w1, make_update(1, [0, 1], y, loss_before=[1.0, 3.0]), log)
    torch.testing.assert_close(w2, vec(0.125 + 2 / 52, -0.375 - 18 / 52))


def test_q_zero_is_unweighted_mean():
    w = _aggregate(QFFL(q=0.0), _federation(lr=0.1), 0, vec(0, 0),
                   make_update(0, [0, 1], [[1, 0], [3, 2]], num_samples=[1, 99], loss_before=[5.0, 0.1]))
    torch.testing.assert_close(w, vec(2, 1))


def test_degenerate_cohorts():
    fed = _federation(lr=0.5)
    # One client, q = 1: w - F dw / (||dw||^2 + L F) with dw = 2 (w - y) = [-2, 0], F = 2: [2 * 2 / (4 + 4), 0].
    one = _aggregate(QFFL(), fed, 0, vec(0, 0), make_update(0, [3], [[1, 0]], loss_before=[2.0]))
    torch.testing.assert_close(one, vec(0.5, 0))
    # All-equal deltas: every D_k and h_k is the same, so the step equals the one-client step.
    same = _aggregate(QFFL(), fed, 0, vec(0, 0), make_update(0, [0, 1], [[1, 0], [1, 0]], loss_before=[2.0, 2.0]))
    torch.testing.assert_close(same, vec(0.5, 0))
    # No client moved: dw = 0, h = L F > 0, the model stays put.
    still = _aggregate(QFFL(), fed, 0, vec(1, 2), make_update(0, [0, 1], [[1, 2], [1, 2]], loss_before=[0.0, 0.0]))
    torch.testing.assert_close(still, vec(1, 2))
    with pytest.raises(RuntimeError, match="loss_before"):
        _aggregate(QFFL(), fed, 0, vec(0, 0), make_update(0, [0], [[1, 0]]))


def test_asks_the_engine_for_loss_before():
    assert QFFL.requires_loss_before
    assert ClientHookSet([QFFL()]).requires_loss_before


@pytest.mark.parametrize("optimizer", [
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    lambda p: torch.optim.Adam(p, lr=0.1),
], ids=["sgd-momentum", "adam"])
def test_setup_rejects_other_client_optimizers(optimizer):
    momentum = float(optimizer([torch.nn.Parameter(torch.zeros(1))]).defaults.get("momentum", 0.0))
    fed = fake_federation(optimizer=optimizer, momentum=momentum)
    with pytest.raises(ConfigError, match=r"^optimizer: q-FFL needs torch.optim.SGD with momentum 0"):
        prepared(QFFL(), fed)
    prepared(QFFL(), fake_federation())  # plain SGD passes


def test_evaluation_alone_skips_the_optimizer_check(tiny, tmp_path):
    # validate trains nothing, so q-FFL's requirement on the client optimizer does not apply.
    saving = [{"class_path": "lightning_fl.callbacks.QFFL"},
              {"class_path": "pytorch_lightning.callbacks.ModelCheckpoint", "init_args": {"save_last": True}}]
    plain = tiny(**{"trainer.callbacks": saving, "trainer.max_epochs": 1})
    assert run_cli("fit", "--config", str(plain)) == 0
    ckpt = next((tmp_path / "logs").rglob("last.ckpt"))
    config = tiny(**{"trainer.callbacks": [{"class_path": "lightning_fl.callbacks.QFFL"}],
                     "model.optimizer.init_args.momentum": 0.9, "model.resume_despite_changes": True})
    assert run_cli("validate", "--config", str(config), "--ckpt_path", str(ckpt)) == 0
    assert run_cli("fit", "--config", str(config)) == 2


def test_bad_arguments():
    with pytest.raises(ConfigError, match="q must be a finite number >= 0"):
        QFFL(q=-1.0)


def test_cli_run_logs_update_norm(tiny, tmp_path):
    assert run_with(tiny, {"class_path": "lightning_fl.callbacks.qffl.QFFL", "init_args": {"q": 1.0}}) == 0
    assert_server_scalar_logged(tmp_path, "server/update_norm")
    losses = assert_server_scalar_logged(tmp_path, "server/loss_before_mean")
    assert losses[-1] < losses[0]


def test_cli_momentum_is_a_one_line_config_error(tiny, tmp_path, capsys):
    optimizer = {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.05, "momentum": 0.9}}
    config = tiny(**{"trainer.callbacks": [{"class_path": "lightning_fl.callbacks.qffl.QFFL"}], "model.optimizer": optimizer})
    assert run_cli("fit", "--config", str(config)) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == ("error: optimizer: q-FFL needs torch.optim.SGD with momentum 0 (it takes L = 1/lr);"
                    " got torch.optim.SGD(momentum=0.9)")
    assert not list((tmp_path / "logs").rglob("*.ckpt"))
