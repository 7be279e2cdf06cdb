"""SCAFFOLD (SPEC 2, option II): hand-computed rounds, the corrected local step, degenerate cases,
resume, CLI."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from lightning_fl.callbacks.scaffold import Scaffold

from lightning_fl.engines import (
    ClientHookSet,
    LocalTrainingPlan,
    SequentialEngine,
    VectorizedEngine,
)
from lightning_fl.faults.validation import ConfigError
from lightning_fl.models import LogisticRegression
from lightning_fl.state.client_state import ClientStateStore
from lightning_fl.state.data import FederatedData
from lightning_fl.state.flat_state import FlatStateLayout
from tests.callbacks.helpers import (
    RecordingLogger,
    TwoParamsAndBuffer,
    aggregate,
    assert_server_scalar_logged,
    fake_federation,
    make_update,
    prepared,
    run_with,
    small_federated_data,
    vec,
)


def _federation(num_clients=4, lr=0.1):
    model = TwoParamsAndBuffer()  # flat layout [w0, w1, r]: r is a buffer, its control stays 0
    return fake_federation(FlatStateLayout(model.state_dict()), lr=lr, num_clients=num_clients, model=model)


def _scaffold(federation, **kwargs) -> Scaffold:
    return prepared(Scaffold(**kwargs), federation)


def client_control(cb: Scaffold, k: int) -> torch.Tensor:
    """``c_k`` of client ``k`` (zeros if it has none)."""
    return cb.client_control.gather(torch.tensor([k]))[0]


def _with_controls(layout: FlatStateLayout, c: torch.Tensor, client_controls: dict[int, torch.Tensor]) -> Scaffold:
    """A Scaffold bound to ``layout`` holding server control ``c`` and the given per-client controls."""
    cb = Scaffold()
    cb.bind_client_state(layout.numel)
    ids = sorted(client_controls)
    cb.load_state_dict({"server": {"control": c},
                        "clients": {"client_control": {"ids": torch.tensor(ids, dtype=torch.long),
                                                       "rows": torch.stack([client_controls[k] for k in ids])}}})
    return cb


def test_two_rounds_match_hand_computation():
    loop, log = _federation(), RecordingLogger()
    cb = _scaffold(loop)
    # Round 0 (c = c_k = 0), eta_l = 0.1, N = 4: clients 0 and 2 with tau = [2, 4].
    w0 = vec(1, 2, 10)
    update0 = make_update(0, [0, 2], [[0.8, 2.2, 11], [1.2, 1.4, 12]], num_steps=[2, 4])
    w1 = aggregate(cb, loop, 0, w0, update0, log)
    torch.testing.assert_close(w1, vec(1.0, 1.8, 11.5))  # w + mean(y - w) = mean(y)
    # c_0+ = (w - y_0) / (2 * 0.1) = [1, -1]; c_2+ = (w - y_2) / (4 * 0.1) = [-0.5, 1.5]; buffer entry 0.
    torch.testing.assert_close(client_control(cb, 0), vec(1, -1, 0))
    torch.testing.assert_close(client_control(cb, 2), vec(-0.5, 1.5, 0))
    torch.testing.assert_close(cb.control, vec(0.125, 0.125, 0))  # (1/4) (c_0+ + c_2+)
    # Round 1: client 2 again (c_2 = [-0.5, 1.5]), client 3 for the first time (c_3 = 0); tau = [1, 2].
    update1 = make_update(1, [2, 3], [[0.9, 1.9, 11], [1.1, 1.6, 12]], num_steps=[1, 2])
    w2 = aggregate(cb, loop, 1, w1, update1, log)
    torch.testing.assert_close(w2, vec(1.0, 1.75, 11.5))
    # c_2+ = c_2 - c + (w - y_2) / 0.1 = [-0.5 - 0.125 + 1, 1.5 - 0.125 - 1] = [0.375, 0.375]
    # c_3+ = 0 - c + (w - y_3) / 0.2 = [-0.125 - 0.5, -0.125 + 1] = [-0.625, 0.875]
    torch.testing.assert_close(client_control(cb, 2), vec(0.375, 0.375, 0))
    torch.testing.assert_close(client_control(cb, 3), vec(-0.625, 0.875, 0))
    torch.testing.assert_close(client_control(cb, 0), vec(1, -1, 0))  # not in the cohort: unchanged
    # c += (1/4) ((c_2+ - c_2) + (c_3+ - 0)) = c + (1/4) [0.25, -0.25]
    torch.testing.assert_close(cb.control, vec(0.1875, 0.0625, 0))
    metrics, step = log.scalars[-1]
    assert step == 2
    assert metrics["server/control_norm"] == pytest.approx(float(vec(0.1875, 0.0625).norm()), rel=1e-6)


def test_server_lr_scales_the_mean_update():
    loop = _federation()
    cb = _scaffold(loop, server_lr=0.5)
    w1 = aggregate(cb, loop, 0, vec(1, 2, 10),
                   make_update(0, [0, 2], [[0.8, 2.2, 11], [1.2, 1.4, 12]], num_steps=[2, 4]))
    torch.testing.assert_close(w1, vec(1.0, 1.9, 10.75))  # w + 0.5 mean(y - w); the controls do not depend on it
    torch.testing.assert_close(cb.control, vec(0.125, 0.125, 0))


def test_degenerate_cases():
    loop = _federation()
    # One client: w^1 = y, c = c_k+ / N.
    one = _scaffold(loop)
    w = aggregate(one, loop, 0, vec(1, 1, 0), make_update(0, [1], [[0.5, 1.5, 3]], num_steps=[5]))
    torch.testing.assert_close(w, vec(0.5, 1.5, 3))
    torch.testing.assert_close(one.control, vec(1, -1, 0) / 4)  # c_1+ = [0.5, -0.5] / 0.5
    # All-equal deltas: every c_k+ is the same.
    same = _scaffold(loop)
    aggregate(same, loop, 0, vec(1, 1, 0), make_update(0, [0, 1, 2], [[0.9, 1.1, 0]] * 3, num_steps=[1] * 3))
    for k in range(3):
        torch.testing.assert_close(client_control(same, k), vec(1, -1, 0))
    torch.testing.assert_close(same.control, vec(0.75, -0.75, 0))
    # A client that took no local step keeps its control (no 0 / 0).
    lazy = _scaffold(loop)
    aggregate(lazy, loop, 0, vec(1, 1, 0), make_update(0, [0, 1], [[1, 1, 0], [0.9, 1.1, 0]], num_steps=[0, 1]))
    torch.testing.assert_close(client_control(lazy, 0), vec(0, 0, 0))
    torch.testing.assert_close(lazy.control, vec(0.25, -0.25, 0))


def test_bad_arguments():
    with pytest.raises(ConfigError, match="server_lr must be a finite number > 0"):
        Scaffold(server_lr=-1.0)


# ------------------------------------------------------------------ client side in the real engine
def _data(sizes=(6, 9, 5), features=4, classes=3) -> FederatedData:
    return small_federated_data(sizes, 3, features, classes)


def _full_batch_gradient(model, x, y):
    """d mean-CE / d (W, b) of a linear model, written out: (softmax - onehot) / n."""
    w, b = model.linear.weight.detach(), model.linear.bias.detach()
    grad_logits = (torch.softmax(x @ w.T + b, dim=1) - F.one_hot(y, w.shape[0]).float()) / len(y)
    return torch.cat([(grad_logits.T @ x).reshape(-1), grad_logits.sum(0)])


def test_local_sgd_step_uses_corrected_gradient():
    torch.manual_seed(0)
    model = LogisticRegression(4, 3)
    data = _data()
    lr = 0.1
    # One full-batch step per client (batch 100 > n_k, one epoch).
    engine = SequentialEngine(LocalTrainingPlan(lambda p: torch.optim.SGD(p, lr=lr), 1, 100, 0, lr))
    engine.setup(model, data, ClientStateStore(3))
    layout = FlatStateLayout(model.state_dict())
    d = layout.numel
    gen = torch.Generator().manual_seed(1)
    c, c_0 = torch.randn(d, generator=gen), torch.randn(d, generator=gen)
    cb = _with_controls(layout, c, {0: c_0})  # client 2 has never been seen: c_2 = 0
    update = engine.train_cohort(0, torch.tensor([0, 2]), torch.ones(2, dtype=torch.long), ClientHookSet([cb]))

    w0 = layout.flatten(model.state_dict())
    for row, (k, c_k) in enumerate(((0, c_0), (2, torch.zeros(d)))):
        x, y = data.client_train(k)
        expected = w0 - lr * (_full_batch_gradient(model, x, y) - c_k + c)
        torch.testing.assert_close(update.weights[row], expected, rtol=1e-5, atol=1e-6)
    assert update.num_steps.tolist() == [1, 1]


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_vectorized_engine_applies_the_same_correction(momentum):
    # Cohort-stacked hooks (C = 3, clients finishing after 4, 6 and 4 steps) give what C = 1 gives.
    torch.manual_seed(0)
    model = LogisticRegression(4, 3)
    data = _data()
    layout = FlatStateLayout(model.state_dict())
    gen = torch.Generator().manual_seed(1)
    c, c_0, c_2 = (torch.randn(layout.numel, generator=gen) for _ in range(3))
    weights = []
    for engine_class in (SequentialEngine, VectorizedEngine):
        plan = LocalTrainingPlan(lambda p: torch.optim.SGD(p, lr=0.1, momentum=momentum), 2, 4, 0, 0.1)
        engine = engine_class(plan)
        engine.setup(model, data, ClientStateStore(3))
        cb = _with_controls(layout, c, {0: c_0, 2: c_2})  # client 1: c_1 = 0
        update = engine.train_cohort(0, torch.tensor([0, 1, 2]), torch.ones(3, dtype=torch.long), ClientHookSet([cb]))
        assert update.num_steps.tolist() == [4, 6, 4]
        weights.append(update.weights)
    torch.testing.assert_close(weights[0], weights[1], rtol=1e-5, atol=1e-6)


def test_momentum_optimizer_warns_once():
    model = LogisticRegression(4, 3)
    cb = Scaffold()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cb.on_federation_setup(fake_federation(FlatStateLayout(model.state_dict()), model=model))  # plain SGD: silent
    loop = fake_federation(FlatStateLayout(model.state_dict()), momentum=0.9, model=model)
    with pytest.warns(UserWarning, match=r"assumes plain SGD.*torch.optim.SGD\(momentum=0.9\)"):
        cb.on_federation_setup(loop)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cb.on_federation_setup(loop)  # once per callback, not once per fit


# ------------------------------------------------------------------ end to end
def test_cli_run_logs_control_norm(tiny, tmp_path):
    assert run_with(tiny, {"class_path": "lightning_fl.callbacks.scaffold.Scaffold"}) == 0
    norms = assert_server_scalar_logged(tmp_path, "server/control_norm")
    assert norms[-1] > 0


