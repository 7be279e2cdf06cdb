"""The sequential engine against a plain hand-written reference of SPEC section 1 and FedAvg/FedProx."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from lightning_fl.callbacks.fedavg import FedAvg
from lightning_fl.callbacks.fedprox import FedProx

from lightning_fl.engines import ClientHookSet, LocalTrainingPlan, SequentialEngine
from lightning_fl.models import LogisticRegression
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.state.client_state import ClientStateStore
from lightning_fl.state.data import FederatedData, offsets_from_sizes
from lightning_fl.state.flat_state import FlatStateLayout
from tests.conftest import reference_epoch_order


def _data(sizes=(7, 12, 4), features=5, classes=3) -> FederatedData:
    gen = torch.Generator().manual_seed(0)
    n = sum(sizes)
    x = torch.randn(n, features, generator=gen)
    y = torch.randint(0, classes, (n,), generator=gen)
    return FederatedData(x, y, offsets_from_sizes(list(sizes)), x[:3], y[:3],
                         offsets_from_sizes([1, 1, 1]), classes)


def _reference_client(model, x, y, *, lr, epochs, batch, seed, round_idx, client, mu=0.0, sub_round=0):
    """Plain SGD written out by hand: w <- w - lr * (grad CE + mu (w - w^t))."""
    w = model.linear.weight.detach().clone()
    b = model.linear.bias.detach().clone()
    w0, b0 = w.clone(), b.clone()
    correct = 0
    for epoch in range(epochs):
        order = reference_epoch_order(seed, round_idx, client, epoch, len(y), sub_round)
        for start in range(0, len(y), batch):
            idx = order[start : start + batch]
            xb, yb = x[idx], y[idx]
            probs = torch.softmax(xb @ w.T + b, dim=1)
            onehot = F.one_hot(yb, probs.shape[1]).float()
            grad_logits = (probs - onehot) / len(yb)  # d mean-CE / d logits
            gw, gb = grad_logits.T @ xb, grad_logits.sum(0)
            if epoch == epochs - 1:
                correct += int((probs.argmax(1) == yb).sum())
            w = w - lr * (gw + mu * (w - w0))
            b = b - lr * (gb + mu * (b - b0))
    return torch.cat([w.reshape(-1), b]), correct / len(y)


@pytest.mark.parametrize("sub_round", [0, 2])  # 2: an institution round of the hierarchy (its own batches)
@pytest.mark.parametrize(("callback", "mu"), [(FedAvg(), 0.0), (FedProx(mu=0.5), 0.5)])
def test_round_matches_hand_written_reference(callback, mu, sub_round):
    torch.manual_seed(0)
    model = LogisticRegression(5, 3)
    data = _data()
    plan = LocalTrainingPlan(lambda p: torch.optim.SGD(p, lr=0.1), local_epochs=2, batch_size=3, seed=11, lr=0.1)
    engine = SequentialEngine(plan)
    engine.setup(model, data, ClientStateStore(3))
    ids = torch.tensor([0, 1, 2])
    update = engine.train_cohort(4, ids, torch.ones(3, dtype=torch.long), ClientHookSet([callback]), sub_round=sub_round)

    expected, accs = [], []
    for k in range(3):
        x, y = data.client_train(k)
        w, acc = _reference_client(model, x, y, lr=0.1, epochs=2, batch=3, seed=11, round_idx=4, client=k, mu=mu,
                                    sub_round=sub_round)
        expected.append(w)
        accs.append(acc)
    torch.testing.assert_close(update.weights, torch.stack(expected), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(update.train_acc, torch.tensor(accs, dtype=torch.float64))
    # tau_k = E * ceil(n_k / B) = 2 * ceil([7, 12, 4] / 3) = [6, 8, 4]
    assert update.num_steps.tolist() == [6, 8, 4]
    assert update.num_samples.tolist() == [7, 12, 4]

    layout = FlatStateLayout(model.state_dict())
    new_w = callback.aggregate(4, layout.flatten(model.state_dict()), update, None, RoundLogger([], 5))
    # FedAvg: sum n_k y_k / sum n_k with n = [7, 12, 4].
    torch.testing.assert_close(new_w, (7 * expected[0] + 12 * expected[1] + 4 * expected[2]) / 23)


def test_global_model_is_untouched_by_local_training():
    model = LogisticRegression(5, 3)
    before = copy.deepcopy(model.state_dict())
    engine = SequentialEngine(LocalTrainingPlan(lambda p: torch.optim.SGD(p, lr=0.5), 1, 4, 0, 0.5))
    engine.setup(model, _data(), ClientStateStore(3))
    engine.train_cohort(0, torch.tensor([1, 2]), torch.ones(2, dtype=torch.long), ClientHookSet([]))
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name])


def test_kept_optimizer_state_carries_momentum_between_participations():
    model = LogisticRegression(5, 3)
    data = _data()
    plan = LocalTrainingPlan(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), 1, 100, 0, 0.1)
    kept, fresh = SequentialEngine(plan), SequentialEngine(plan)
    kept.setup(model, data, ClientStateStore(3, keep_optimizer_state=True))
    fresh.setup(model, data, ClientStateStore(3, keep_optimizer_state=False))
    ids, ones = torch.tensor([0]), torch.ones(1, dtype=torch.long)
    first = kept.train_cohort(0, ids, ones, ClientHookSet([]))
    fresh.train_cohort(0, ids, ones, ClientHookSet([]))
    # One full-batch step per round: with the momentum buffer kept, the second step is
    # -lr (g2 + 0.9 g1) instead of -lr g2 (model weights are unchanged between the calls).
    second_kept = kept.train_cohort(1, ids, ones, ClientHookSet([]))
    second_fresh = fresh.train_cohort(1, ids, ones, ClientHookSet([]))
    layout = FlatStateLayout(model.state_dict())
    w0 = layout.flatten(model.state_dict())
    step_fresh = second_fresh.weights[0] - w0
    step_first = first.weights[0] - w0
    torch.testing.assert_close(second_kept.weights[0] - w0, step_fresh + 0.9 * step_first)
