"""BatchNorm in the vectorized engine: per-client batch and running statistics (docs/algorithms.md, FedBN).

The vectorized engine must give what the sequential engine (``nn.BatchNorm*d`` per client) gives:
weights, running statistics and ``num_batches_tracked`` after a local pass, with clients whose last
batch is partial (padding rows in the stacked batch must not enter the statistics), in chunks and
from personal start rows; and FedBN's global and personal models after two rounds.
"""

from __future__ import annotations

import copy
import tempfile

import pytest
import pytorch_lightning as pl
import torch
from torch import nn

from lightning_fl.callbacks import FedBN
from lightning_fl.datamodules import SyntheticDataModule
from lightning_fl.engines import (
    ClientHooks,
    ClientHookSet,
    LocalTrainingPlan,
    SequentialEngine,
    VectorizedEngine,
    build_engine,
)
from lightning_fl.models import MLP
from lightning_fl.models.base import ClientModule
from lightning_fl.personalization import EvalProtocol
from lightning_fl.simulation.loop import FederatedLoop
from lightning_fl.state.client_state import ClientStateStore
from lightning_fl.state.data import FederatedData, offsets_from_sizes

SIZES = (23, 7, 4, 15, 9)  # B = 5: last batches of 3, 2, 4, 5 and 4 samples (padding in the stacked batch)


class _ConvBN(ClientModule):
    """Conv2d -> BatchNorm2d (momentum None: a cumulative average) -> ReLU -> Linear."""

    def __init__(self) -> None:
        super().__init__(3, (2, 4, 4))
        self.conv, self.bn = nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3, momentum=None)
        self.fc = nn.Linear(48, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


def _data(shape=(6,), classes=4, sizes=SIZES) -> FederatedData:
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(sum(sizes), *shape, generator=gen), torch.randint(0, classes, (sum(sizes),), generator=gen)
    ones = offsets_from_sizes([1] * len(sizes))
    return FederatedData(x, y, offsets_from_sizes(list(sizes)), x[: len(sizes)], y[: len(sizes)], ones, classes)


def _momentum(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=0.01)


def _engine(cls, model, data, **plan_args):
    plan = LocalTrainingPlan(_momentum, local_epochs=2, batch_size=5, seed=3, lr=0.05, **plan_args)
    engine = cls(plan)
    engine.setup(model, data, ClientStateStore(data.num_clients, False))
    return engine


class _TrainedAccuracy(ClientHooks):
    requires_trained_accuracy = True


def _train(engine, client_ids=(0, 1, 2, 3, 4), start_rows=None):
    ids = torch.tensor(client_ids)
    return engine.train_cohort(0, ids, torch.ones(len(ids), dtype=torch.long), ClientHookSet([_TrainedAccuracy()]),
                               start_rows=start_rows)


def _bn_model() -> MLP:
    torch.manual_seed(0)
    return MLP(6, 4, hidden=(8, 8), batch_norm=True)


@pytest.mark.parametrize(("make", "shape", "classes", "chunk"), [
    (_bn_model, (6,), 4, None), (_bn_model, (6,), 4, 2), (_ConvBN, (2, 4, 4), 3, None),
], ids=["mlp", "mlp-in-chunks", "conv-bn2d-cumulative"])
def test_one_local_pass_equals_the_sequential_engine(make, shape, classes, chunk) -> None:
    """Weights, running statistics, counters and statistics agree, padding rows present."""
    torch.manual_seed(0)
    model, data = make(), _data(shape, classes)
    seq = _train(_engine(SequentialEngine, copy.deepcopy(model), data))
    engine = _engine(VectorizedEngine, copy.deepcopy(model), data, max_parallel_clients=chunk)
    assert engine.forward.kind == "batched"
    vec = _train(engine)
    stats = [e for e in engine.layout.float_entries if "running" in e.name]
    for entry in stats:  # the statistics trained (they are not w^t's) and agree per client
        columns = slice(entry.start, entry.stop)
        start = engine.layout.flatten(model.state_dict())[columns]
        assert not torch.allclose(seq.weights[:, columns], start.expand(len(SIZES), -1))
        torch.testing.assert_close(vec.weights[:, columns], seq.weights[:, columns], rtol=0, atol=1e-5)
    torch.testing.assert_close(vec.weights, seq.weights, rtol=0, atol=1e-5)
    assert vec.int_state.keys() == seq.int_state.keys() and vec.int_state
    for name, value in seq.int_state.items():  # the first member's: w^t's 0 plus its tau_k = 10
        assert torch.equal(vec.int_state[name], value) and int(value) == 10
    torch.testing.assert_close(vec.train_acc, seq.train_acc)
    torch.testing.assert_close(vec.train_loss, seq.train_loss)
    torch.testing.assert_close(vec.trained_acc, seq.trained_acc)  # eval mode, each row's running statistics


def test_personal_start_rows_carry_each_clients_statistics() -> None:
    """From start rows with different running statistics per client (FedBN's p_k), both engines agree."""
    model, data = _bn_model(), _data()
    layout = _engine(SequentialEngine, copy.deepcopy(model), data).layout
    gen = torch.Generator().manual_seed(1)
    rows = layout.flatten(model.state_dict()).repeat(len(SIZES), 1)
    rows += 0.1 * torch.rand(rows.shape, generator=gen)  # running variances stay positive
    # Copies: start rows are consumed (each engine writes its trained rows into them).
    seq = _train(_engine(SequentialEngine, copy.deepcopy(model), data), start_rows=rows.clone())
    vec = _train(_engine(VectorizedEngine, copy.deepcopy(model), data), start_rows=rows.clone())
    torch.testing.assert_close(vec.weights, seq.weights, rtol=0, atol=1e-5)
    torch.testing.assert_close(vec.trained_acc, seq.trained_acc)


def test_a_batch_of_one_sample_fails_as_in_the_sequential_engine() -> None:
    """nn.BatchNorm1d cannot train on one value per channel; neither engine trains it silently."""
    model, data = _bn_model(), _data(sizes=(11, 7))  # 11 = 2 * 5 + 1: a last batch of one sample
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        _train(_engine(SequentialEngine, copy.deepcopy(model), data), (0, 1))
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        _train(_engine(VectorizedEngine, copy.deepcopy(model), data), (0, 1))


def test_auto_trains_a_batchnorm_mlp_vectorized() -> None:
    plan = LocalTrainingPlan(_momentum, 1, 5, 0, 0.05)
    assert build_engine("auto", plan, _bn_model(), torch.device("cpu")).name == "vectorized"


def _fit_fedbn(engine: str) -> tuple[FederatedLoop, FedBN]:
    callback = FedBN()
    loop = FederatedLoop(client=_bn_model_60(), optimizer=lambda p: torch.optim.SGD(p, lr=0.05), clients_per_round=4,
                         sampling="all", local_epochs=1, batch_size=10, seed=3, engine=engine,
                         eval=EvalProtocol(model="personal"))
    trainer = pl.Trainer(default_root_dir=tempfile.mkdtemp(prefix="lfl-"), max_epochs=2, accelerator="cpu",
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, callbacks=[callback])
    trainer.fit(loop, datamodule=SyntheticDataModule("1_1", num_clients=4, max_samples_per_client=40))
    return loop, callback


def _bn_model_60() -> MLP:
    torch.manual_seed(0)
    return MLP(60, 10, hidden=(8,), batch_norm=True)


def test_fedbn_two_rounds_give_the_same_models_in_both_engines() -> None:
    seq, a = _fit_fedbn("sequential")
    vec, b = _fit_fedbn("vectorized")
    assert vec.engine.name == "vectorized"
    sizes = [len(vec.data.client_train(k)[1]) for k in range(4)]
    assert any(n % 10 for n in sizes)  # some client's last batch is partial: padding rows were present
    torch.testing.assert_close(vec.layout.flatten(vec.model.state_dict()), seq.layout.flatten(seq.model.state_dict()),
                               rtol=0, atol=1e-5)
    ids = torch.arange(4)
    mask = b.mask(torch.device("cpu"))
    assert not torch.equal(b.personal.gather(ids)[:, mask], b.personal.gather(ids)[:1, mask].expand(4, -1))
    torch.testing.assert_close(b.personal.gather(ids)[:, mask], a.personal.gather(ids)[:, mask], rtol=0, atol=1e-5)
    # The personal evaluation (each client's BN statistics, eval mode) scores the same models.
    assert torch.equal(vec.last_evaluation.correct, seq.last_evaluation.correct)
