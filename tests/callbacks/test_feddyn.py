"""FedDyn against hand computations: the server step, the client state and the local loss term."""

from __future__ import annotations

import pytest
import torch
from lightning_fl.callbacks import FedAvg, FedDyn

from lightning_fl.engines import (
    ClientHookSet,
    LocalTrainingPlan,
    SequentialEngine,
    VectorizedEngine,
)
from lightning_fl.faults.validation import ConfigError
from lightning_fl.models import LogisticRegression
from lightning_fl.state.client_state import ClientStateStore
from lightning_fl.state.flat_state import FlatStateLayout
from tests.callbacks.helpers import (
    RecordingLogger,
    aggregate,
    fake_federation,
    make_update,
    prepared,
    small_federated_data,
    vec,
    vector_layout,
)


def test_two_rounds_match_hand_computation():
    fed, log = fake_federation(vector_layout(2), num_clients=4), RecordingLogger()
    dyn = prepared(FedDyn(alpha=0.1), fed)
    # Round 0 from w = (0, 0): h = -(0.1/4)((1,2) + (3,0)) = (-0.1, -0.05);
    # w = mean y - h / alpha = (2, 1) + (1, 0.5) = (3, 1.5); g_0 = -0.1 (1, 2), g_1 = -0.1 (3, 0).
    w = aggregate(dyn, fed, 0, vec(0, 0), make_update(0, [0, 1], [[1, 2], [3, 0]]), log)
    torch.testing.assert_close(w, vec(3, 1.5))
    torch.testing.assert_close(dyn.h, vec(-0.1, -0.05))
    torch.testing.assert_close(dyn.grad_k.gather(torch.tensor([0, 1, 2])), torch.tensor([[-0.1, -0.2], [-0.3, 0.0],
                                                                                         [0.0, 0.0]]))
    # Round 1 from (3, 1.5), clients 1 and 2 at (3, 2) and (5, 1.5): deltas (0, 0.5) and (2, 0);
    # h = (-0.1, -0.05) - 0.025 (2, 0.5) = (-0.15, -0.0625); w = (4, 1.75) + (1.5, 0.625) = (5.5, 2.375);
    # g_1 = (-0.3, 0) - 0.1 (0, 0.5) = (-0.3, -0.05), g_2 = -0.1 (2, 0) = (-0.2, 0).
    w = aggregate(dyn, fed, 1, w, make_update(1, [1, 2], [[3, 2], [5, 1.5]]), log)
    torch.testing.assert_close(w, vec(5.5, 2.375))
    torch.testing.assert_close(dyn.h, vec(-0.15, -0.0625))
    torch.testing.assert_close(dyn.grad_k.gather(torch.tensor([1, 2])), torch.tensor([[-0.3, -0.05], [-0.2, 0.0]]))
    assert [step for _, step in log.scalars] == [1, 2]
    assert log.scalars[-1][0]["server/h_norm"] == pytest.approx((0.15**2 + 0.0625**2) ** 0.5, rel=1e-6)


@pytest.mark.parametrize("engine_cls", [SequentialEngine, VectorizedEngine])
def test_one_local_step_descends_the_regularised_objective(engine_cls):
    # One step (batch >= n_k) from w^t: the gradient of -<g_k, w> + alpha/2 ||w - w^t||^2 at w^t is
    # -g_k, so FedDyn's client model is FedAvg's plus lr * g_k, exactly.
    torch.manual_seed(0)
    model = LogisticRegression(4, 3)
    data = small_federated_data([6, 5, 4], seed=1)
    layout = FlatStateLayout(model.state_dict())
    fed = fake_federation(layout, model=model, num_clients=3)
    lr = 0.2
    plan = LocalTrainingPlan(lambda p: torch.optim.SGD(p, lr=lr), local_epochs=1, batch_size=8, seed=3, lr=lr)
    ids = torch.tensor([0, 1])
    g = torch.randn(2, layout.numel, generator=torch.Generator().manual_seed(5))
    results = {}
    for name, callback in (("avg", FedAvg()), ("dyn", prepared(FedDyn(alpha=0.5), fed))):
        if name == "dyn":
            callback.grad_k.scatter(ids, g)
        engine = engine_cls(plan)
        engine.setup(model, data, ClientStateStore(3))
        results[name] = engine.train_cohort(0, ids, torch.ones(2, dtype=torch.long), ClientHookSet([callback])).weights
    torch.testing.assert_close(results["dyn"] - results["avg"], lr * g, rtol=1e-5, atol=1e-6)


def test_alpha_must_be_positive():
    with pytest.raises(ConfigError, match="alpha must be a finite number > 0"):
        FedDyn(alpha=0.0)
