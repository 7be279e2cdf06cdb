"""The vectorized client engine on its own: finished clients, formulations, errors, ``auto``, bf16."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from torch import nn

from lightning_fl.engines import (
    ClientHooks,
    ClientHookSet,
    LocalTrainingPlan,
    SequentialEngine,
    VectorizedEngine,
    build_engine,
)
from lightning_fl.engines.formulation import build_forward
from lightning_fl.engines.optimizers import ELEMENT_WISE_OPTIMIZERS
from lightning_fl.engines.schedule import build_schedule
from lightning_fl.faults.validation import ConfigError
from lightning_fl.models import CNN28, MLP, LogisticRegression
from lightning_fl.models.base import ClientModule
from lightning_fl.state.client_state import ClientStateStore
from lightning_fl.state.data import FederatedData, offsets_from_sizes

SIZES = (23, 7, 4, 15, 9)  # B = 5, E = 2: tau_k = 10, 4, 2, 6, 4


def _data(shape=(6,), classes=4, vocab: int | None = None) -> FederatedData:
    gen = torch.Generator().manual_seed(0)
    total = sum(SIZES)
    x = torch.randint(0, vocab, (total, *shape), generator=gen) if vocab else torch.randn(total, *shape, generator=gen)
    y = torch.randint(0, classes, (total,), generator=gen)
    ones = offsets_from_sizes([1] * len(SIZES))
    return FederatedData(x, y, offsets_from_sizes(list(SIZES)), x[: len(SIZES)], y[: len(SIZES)], ones, classes)


def _momentum(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=0.01)


def _engine(cls, model, data, optimizer=_momentum, keep=False, precision="32-true", **plan_args):
    plan = LocalTrainingPlan(optimizer, local_epochs=2, batch_size=5, seed=3, lr=0.05, precision=precision, **plan_args)
    engine = cls(plan)
    engine.setup(model, data, ClientStateStore(data.num_clients, keep))
    return engine


def _train(engine, client_ids, hooks=(), round_idx=0):
    ids = torch.tensor(client_ids)
    return engine.train_cohort(round_idx, ids, torch.ones(len(ids), dtype=torch.long), ClientHookSet(list(hooks)))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


class _PushEveryStep(ClientHooks):
    """after_local_step that would move every row, finished or not; records ``ctx.active``."""

    def __init__(self) -> None:
        self.active: list[list[bool]] = []

    def after_local_step(self, ctx, params, step_delta):
        self.active.append(ctx.active_mask().tolist())
        for value in params.values():
            value.add_(1e-3)


def test_finished_clients_do_not_move():
    """Each client's result in a cohort equals training it alone (sequentially) for its own tau_k steps,
    although momentum, weight decay and a hook that moves every row would move a finished client."""
    model, data = LogisticRegression(6, 4), _data()
    cohort = _train(_engine(VectorizedEngine, model, data), [0, 1, 2, 3, 4], [_PushEveryStep()])
    for position in range(len(SIZES)):
        solo = _train(_engine(SequentialEngine, copy.deepcopy(model), data), [position], [_PushEveryStep()])
        torch.testing.assert_close(cohort.weights[position], solo.weights[0], rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(cohort.train_acc[position], solo.train_acc[0])
    assert cohort.num_steps.tolist() == [10, 4, 2, 6, 4]


def test_finished_clients_keep_their_optimizer_state():
    model, data = LogisticRegression(6, 4), _data()
    together = _engine(VectorizedEngine, model, data, keep=True)
    _train(together, [0, 1, 2, 3, 4])
    for client in range(len(SIZES)):
        alone = _engine(VectorizedEngine, model, data, keep=True)
        _train(alone, [client])
        mine, theirs = together.store.optimizer_state(client), alone.store.optimizer_state(client)
        for index, entries in theirs["state"].items():
            torch.testing.assert_close(mine["state"][index]["momentum_buffer"], entries["momentum_buffer"],
                                       rtol=1e-6, atol=1e-7)


def test_hooks_see_clients_deactivate_in_order_of_tau():
    hook = _PushEveryStep()
    _train(_engine(VectorizedEngine, LogisticRegression(6, 4), _data()), [0, 1, 2, 3, 4], [hook])
    # Chunk order is by decreasing tau: clients 0 (10), 3 (6), 1 (4), 4 (4), 2 (2).
    assert [sum(a) for a in hook.active] == [5, 5, 4, 4, 2, 2, 1, 1, 1, 1]


@pytest.mark.parametrize("optimizer_class", ELEMENT_WISE_OPTIMIZERS, ids=lambda c: c.__name__)
def test_every_allowed_optimizer_is_exact(optimizer_class):
    def factory(params):
        return optimizer_class(params, lr=0.01)

    model, data = MLP(6, 4, hidden=(8,)), _data()
    results = []
    for cls in (SequentialEngine, VectorizedEngine):
        engine = _engine(cls, copy.deepcopy(model), data, optimizer=factory, keep=True)
        _train(engine, [0, 1, 2, 3, 4], round_idx=0)
        results.append(_train(engine, [1, 2, 3], round_idx=1).weights)  # kept state, different step counts
    assert _rel(results[1], results[0]) < 1e-5


class _Sequence(ClientModule):
    def __init__(self) -> None:
        super().__init__(4, (5,))
        self.embedding = nn.Embedding(12, 6, padding_idx=0)
        self.lstm = nn.LSTM(6, 8, num_layers=2, batch_first=True)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        out, _ = self.lstm(self.embedding(x))
        return self.head(self.norm(out[:, -1]))


class _GroupNormCNN(ClientModule):
    def __init__(self) -> None:
        super().__init__(4, (2, 6, 6))
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.norm = nn.GroupNorm(2, 4)
        self.head = nn.Linear(4 * 36, 4)

    def forward(self, x):
        return self.head(torch.relu(self.norm(self.conv(x))).flatten(1))


class _ScaledInput(ClientModule):
    """A parameter outside any known layer: only the vmap formulation can batch it."""

    def __init__(self) -> None:
        super().__init__(4, (6,))
        self.scale = nn.Parameter(torch.ones(6))
        self.head = nn.Linear(6, 4)

    def forward(self, x):
        return self.head(x * self.scale)

    def loss(self, logits, target):  # a custom loss takes the autograd path
        return nn.functional.cross_entropy(logits.float(), target, label_smoothing=0.1)


@pytest.mark.parametrize(("make_model", "data_args", "expected_kind"), [
    (lambda: MLP(6, 4, hidden=(8,)), {}, "fused-linear"),
    (_Sequence, {"shape": (5,), "vocab": 12}, "batched"),
    (_GroupNormCNN, {"shape": (2, 6, 6)}, "batched"),
    (_ScaledInput, {}, "vmap"),
], ids=["mlp", "embedding_lstm_layernorm", "conv_groupnorm", "custom_parameter_and_loss"])
def test_formulations_match_sequential(make_model, data_args, expected_kind):
    torch.manual_seed(0)
    model, data = make_model(), _data(**data_args)
    vectorized = _engine(VectorizedEngine, copy.deepcopy(model), data)
    assert vectorized.forward.kind == expected_kind
    got = _train(vectorized, [0, 1, 2, 3, 4]).weights
    want = _train(_engine(SequentialEngine, copy.deepcopy(model), data), [0, 1, 2, 3, 4]).weights
    assert _rel(got, want) < 1e-5


@pytest.mark.parametrize("kind", ["batched", "vmap"])
def test_autograd_formulations_match_the_fused_one(kind):
    model, data = MLP(6, 4, hidden=(8,)), _data()
    fused = _train(_engine(VectorizedEngine, copy.deepcopy(model), data), [0, 1, 2, 3, 4]).weights
    engine = _engine(VectorizedEngine, copy.deepcopy(model), data)
    engine.forward = build_forward(kind, engine.model)
    assert _rel(_train(engine, [0, 1, 2, 3, 4]).weights, fused) < 1e-5


def test_non_element_wise_optimizer_is_a_config_error():
    plan = LocalTrainingPlan(lambda p: torch.optim.LBFGS(p), 1, 5, 0, 1.0)
    with pytest.raises(ConfigError, match=r"^engine: vectorized .*LBFGS is not element-wise"):
        build_engine("vectorized", plan, LogisticRegression(6, 4), torch.device("cpu"))
    assert isinstance(build_engine("auto", plan, LogisticRegression(6, 4), torch.device("cpu")), SequentialEngine)


def test_optimizer_subclass_is_refused():
    class MySGD(torch.optim.SGD):
        pass

    plan = LocalTrainingPlan(lambda p: MySGD(p, lr=0.1), 1, 5, 0, 0.1)
    with pytest.raises(ConfigError, match="MySGD is not element-wise"):
        build_engine("vectorized", plan, LogisticRegression(6, 4), torch.device("cpu"))


@pytest.mark.parametrize(("norm", "message"), [
    (lambda: nn.InstanceNorm1d(8, affine=True, track_running_stats=True), "InstanceNorm1d .*keeps running batch"),
    (lambda: nn.SyncBatchNorm(8), "SyncBatchNorm .*keeps running batch"),
    (lambda: nn.BatchNorm1d(8, track_running_stats=False), "BatchNorm1d .*has no running statistics"),
], ids=["instance-norm", "sync-batch-norm", "batch-norm-without-running-stats"])
def test_unsupported_batch_statistics_are_a_config_error(norm, message):
    """BatchNorm1d/2d/3d train vectorized (tests/test_batchnorm_vectorized.py); these are refused."""
    class WithNorm(ClientModule):
        def __init__(self) -> None:
            super().__init__(4, (6,))
            self.net = nn.Sequential(nn.Linear(6, 8), norm(), nn.Linear(8, 4))

        def forward(self, x):
            return self.net(x)

    plan = LocalTrainingPlan(_momentum, 1, 5, 0, 0.05)
    with pytest.raises(ConfigError, match=rf"^engine: vectorized .*{message}"):
        build_engine("vectorized", plan, WithNorm(), torch.device("cpu"))
    assert isinstance(build_engine("auto", plan, WithNorm(), torch.device("cpu")), SequentialEngine)


@pytest.mark.parametrize(("model", "device", "expected"), [
    (LogisticRegression(6, 4), "cpu", "vectorized"),
    (MLP(6, 4), "cpu", "vectorized"),
    (CNN28(4), "cpu", "sequential"),
    (CNN28(4), "cuda", "vectorized"),  # only decided here; nothing runs on the device
])
def test_auto_choice_is_logged(model, device, expected, caplog):
    plan = LocalTrainingPlan(_momentum, 1, 5, 0, 0.05)
    with caplog.at_level(logging.INFO):
        engine = build_engine("auto", plan, model, torch.device(device))
    assert engine.name == expected
    assert f"Client engine: {expected} (auto: " in caplog.text


def test_bf16_mixed_runs_close_to_fp32():
    model, data = MLP(6, 4, hidden=(8,)), _data()
    fp32 = _train(_engine(SequentialEngine, copy.deepcopy(model), data), [0, 1, 2, 3, 4])
    engine = _engine(VectorizedEngine, copy.deepcopy(model), data, precision="bf16-mixed")
    assert engine.forward.kind == "batched"  # the hand-written fp32 path is not used under autocast
    bf16 = _train(engine, [0, 1, 2, 3, 4])
    assert torch.isfinite(bf16.weights).all()
    assert _rel(bf16.weights, fp32.weights) < 2e-2
    assert (bf16.train_loss - fp32.train_loss).abs().max() < 0.05


def test_schedule_covers_every_sample_once_per_epoch():
    schedule = build_schedule(seed=1, round_idx=2, sub_round=0, client_ids=[0, 3, 1], sizes=[23, 15, 7],
                              offsets=[0, 34, 23], local_epochs=2, batch_size=5, device=torch.device("cpu"))
    assert schedule.active == [3] * 4 + [2] * 2 + [1] * 4  # tau = 2 * ceil(n / 5) = 10, 6, 4
    assert schedule.widths == [5 * a for a in schedule.active] and len(schedule.index) == 5 * 20
    for j, (size, offset, per_epoch) in enumerate(zip([23, 15, 7], [0, 34, 23], [5, 3, 2])):
        mine = schedule.client == j  # packed rows: this client's B rows of each of its steps, in order
        index, weight, final = (t[mine].view(2 * per_epoch, 5)
                                for t in (schedule.index, schedule.weight, schedule.final))
        for epoch in range(2):
            steps = slice(epoch * per_epoch, (epoch + 1) * per_epoch)
            real = weight[steps] > 0
            assert sorted(index[steps][real].tolist()) == list(range(offset, offset + size))
            # Each step's weights are 1/|batch|: the weighted loss is the batch mean (last batch partial).
            torch.testing.assert_close(weight[steps].sum(1), torch.ones(per_epoch))
        last = slice(per_epoch, 2 * per_epoch)
        assert int(final.sum()) == size and torch.equal(final[last] > 0, weight[last] > 0)
