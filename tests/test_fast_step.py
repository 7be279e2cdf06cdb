"""The per-step shortcuts of the J1 path: plain SGD's step and the single-Linear fused gradients.

Both must give exactly what the general code gives (torch's ``SGD.step``; the chain walk and autograd).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from lightning_fl.engines.fused import FusedLinearChain, linear_chain
from lightning_fl.engines.optimizers import step_function
from lightning_fl.models import LogisticRegression


def _params(seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    params = [torch.randn(3, 4, 5, generator=gen).requires_grad_(), torch.randn(3, 4, generator=gen).requires_grad_()]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    return params


def _step_both(make, steps: int = 3, lr_schedule=None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """``steps`` steps of ``make(params)`` through step_function and through torch's own ``step``."""
    ours, theirs = _params(0), _params(0)
    opt_ours, opt_theirs = make(ours), make(theirs)
    step = step_function(opt_ours)
    for k in range(steps):
        if lr_schedule is not None:
            for opt in (opt_ours, opt_theirs):
                opt.param_groups[0]["lr"] = lr_schedule(k)
        step()
        opt_theirs.step()
    return ours, theirs


def test_plain_sgd_step_is_exactly_torchs_and_the_same_as_the_formula():
    ours, theirs = _step_both(lambda p: torch.optim.SGD(p, lr=0.1))
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)
    # By hand: three steps of w <- w - 0.1 g with a fixed g are w0 - 0.3 g (up to float rounding).
    start = _params(0)
    for a, w0 in zip(ours, start):
        torch.testing.assert_close(a.detach(), (w0 - 0.3 * w0.grad).detach())


def test_a_learning_rate_changed_between_steps_is_used():
    ours, theirs = _step_both(lambda p: torch.optim.SGD(p, lr=0.1), lr_schedule=lambda k: [0.5, 0.25, 0.125][k])
    start = _params(0)
    for a, b, w0 in zip(ours, theirs, start):
        assert torch.equal(a, b)
        torch.testing.assert_close(a.detach(), (w0 - 0.875 * w0.grad).detach())


def test_other_sgd_settings_take_torchs_step():
    for kwargs in ({"momentum": 0.9}, {"weight_decay": 0.01}, {"maximize": True}, {"momentum": 0.5, "nesterov": True}):
        ours, theirs = _step_both(lambda p, kw=kwargs: torch.optim.SGD(p, lr=0.1, **kw))
        for a, b in zip(ours, theirs):
            assert torch.equal(a, b), kwargs
    # Momentum by hand, one parameter, g constant: buffers g, 1.9 g, 2.71 g -> w0 - 0.1 * 5.61 g.
    ours, _ = _step_both(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))
    w0 = _params(0)[0]
    torch.testing.assert_close(ours[0].detach(), (w0 - 0.561 * w0.grad).detach())


def test_a_parameter_without_gradient_is_left_alone():
    params = _params(0)
    params[1].grad = None
    before = params[1].detach().clone()
    step_function(torch.optim.SGD(params, lr=0.1))()
    assert torch.equal(params[1].detach(), before)


def test_single_linear_gradients_match_the_chain_walk_and_autograd():
    torch.manual_seed(0)
    model = LogisticRegression(6, 4)
    ops = linear_chain(model, 1)
    fast, walk = FusedLinearChain(ops), FusedLinearChain(ops)
    assert fast._single == "linear"
    walk._single = None  # the generic chain walk
    clients, batch = 3, 5
    gen = torch.Generator().manual_seed(1)
    params = {"linear.weight": torch.randn(clients, 4, 6, generator=gen),
              "linear.bias": torch.randn(clients, 4, generator=gen)}
    x = torch.randn(clients * batch, 6, generator=gen)
    y = torch.randint(0, 4, (clients * batch,), generator=gen)
    weight = torch.full((clients * batch, 1), 1 / batch)
    weight[-2:] = 0  # two padding rows of the last client
    weight[-batch:-2] = 1 / 3
    offset = -weight * F.one_hot(y, 4).float()
    for forward in (fast, walk):
        forward.bind(params)
    with torch.no_grad():
        got, logits = fast.gradients(x, weight, offset)
        expected, expected_logits = walk.gradients(x, weight, offset)
    assert torch.equal(logits, expected_logits)
    for name in params:
        assert torch.equal(got[name], expected[name])
    # Autograd on each client's own mean loss over its real samples.
    for c in range(clients):
        w = params["linear.weight"][c].clone().requires_grad_()
        b = params["linear.bias"][c].clone().requires_grad_()
        rows = slice(c * batch, (c + 1) * batch)
        real = weight[rows, 0] > 0
        F.cross_entropy((x[rows] @ w.T + b)[real], y[rows][real]).backward()
        torch.testing.assert_close(got["linear.weight"][c], w.grad)
        torch.testing.assert_close(got["linear.bias"][c], b.grad)


def test_a_chain_with_two_linears_takes_the_chain_walk():
    net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 4))
    assert FusedLinearChain(linear_chain(net, 1))._single is None


# ------------------------------------------------------------------------------------ the one-loop path
def _plain_sgd(params):
    return torch.optim.SGD(params, lr=0.1)


def _cohort(monkeypatch, model, one_loop: bool, client_ids=(0, 1, 2, 3, 4)):
    """The vectorized engine on unequal clients (so clients finish at different steps), with or without
    the one-loop path; returns the result and how many step runs the loop took."""
    import lightning_fl.engines.vectorized as vectorized
    from tests.test_vectorized_engine import VectorizedEngine, _data, _engine, _train

    runs = []
    real = FusedLinearChain.sgd_steps
    monkeypatch.setattr(FusedLinearChain, "sgd_steps", lambda self, steps, *a: runs.append(steps) or real(self, steps, *a))
    if not one_loop:
        monkeypatch.setattr(vectorized, "plain_sgd_rate", lambda optimizer: None)
    result = _train(_engine(VectorizedEngine, model, _data(), optimizer=_plain_sgd), list(client_ids))
    monkeypatch.undo()
    return result, runs


def _bias_free() -> torch.nn.Module:
    model = LogisticRegression(6, 4)
    model.linear = torch.nn.Linear(6, 4, bias=False)
    return model


@pytest.mark.parametrize("softmax_rows", [32, 0], ids=["torch-softmax", "softmax-by-hand"])
def test_the_one_loop_path_equals_the_step_by_step_weights_and_statistics(monkeypatch, softmax_rows):
    import lightning_fl.engines.fused as fused

    for make in (lambda: LogisticRegression(6, 4), _bias_free):
        torch.manual_seed(0)
        model = make()
        monkeypatch.setattr(fused, "TORCH_SOFTMAX_ROWS", softmax_rows)
        fast, runs = _cohort(monkeypatch, copy.deepcopy(model), one_loop=True)
        slow, none = _cohort(monkeypatch, copy.deepcopy(model), one_loop=False)
        # tau_k = 10, 4, 2, 6, 4 (tests/test_vectorized_engine.py): 5 clients train steps 0-1, 4 steps 2-3,
        # 2 steps 4-5, 1 steps 6-9: four runs.
        assert [(r.start, r.stop) for r in runs] == [(0, 2), (2, 4), (4, 6), (6, 10)] and none == []
        # Equal to float rounding: the one loop updates the weight with one baddbmm_ (no gradient tensor).
        torch.testing.assert_close(fast.weights, slow.weights, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(fast.train_acc, slow.train_acc)
        torch.testing.assert_close(fast.train_loss, slow.train_loss, rtol=1e-6, atol=1e-7)


def test_one_client_of_plain_sgd_by_hand(monkeypatch):
    # Client 2 alone (4 samples, B = 5, E = 2: two steps on its whole data): w <- w - 0.1 * grad of the mean
    # cross-entropy, written here with autograd on the plain formula.
    from tests.test_vectorized_engine import _data

    torch.manual_seed(0)
    model = LogisticRegression(6, 4)
    fast, runs = _cohort(monkeypatch, copy.deepcopy(model), one_loop=True, client_ids=(2,))
    assert len(runs) == 1
    data = _data()
    x, y = data.x_train[30:34], data.y_train[30:34]  # client 2's rows: offsets 0, 23, 30, 34, ...
    w, b = model.linear.weight.detach().clone(), model.linear.bias.detach().clone()
    for _ in range(2):
        w.requires_grad_(), b.requires_grad_()
        F.cross_entropy(x @ w.T + b, y).backward()
        w, b = (w - 0.1 * w.grad).detach(), (b - 0.1 * b.grad).detach()
    torch.testing.assert_close(fast.weights[0], torch.cat([w.flatten(), b]))


def test_momentum_a_hook_or_a_hidden_layer_take_the_step_by_step_path(monkeypatch):
    import lightning_fl.engines.vectorized as vectorized
    from tests.test_vectorized_engine import VectorizedEngine, _PushEveryStep, _data, _engine, _train

    runs = []
    monkeypatch.setattr(FusedLinearChain, "sgd_steps", lambda self, steps, *a: runs.append(steps))
    _train(_engine(VectorizedEngine, LogisticRegression(6, 4), _data()), [0, 1])  # momentum 0.9
    _train(_engine(VectorizedEngine, LogisticRegression(6, 4), _data(), optimizer=_plain_sgd), [0, 1],
           [_PushEveryStep()])
    net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 4))
    assert vectorized.plain_sgd_rate(torch.optim.SGD(net.parameters(), lr=0.1)) == 0.1
    assert vectorized.plain_sgd_rate(torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.5)) is None
    assert runs == []
