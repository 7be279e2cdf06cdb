"""A client that stops early (a straggler's partial work): exactly the steps it was given, in both engines."""

from __future__ import annotations

import copy
import tempfile

import pytest
import pytorch_lightning as pl
import torch
from lightning_fl.callbacks import FedAvg, FedProx, Scaffold
from lightning_fl.datamodules import SyntheticDataModule

from lightning_fl.models import LogisticRegression
from lightning_fl.simulation.loop import FederatedLoop
from lightning_fl.simulation.system import SystemHeterogeneity
from tests.conftest import reference_epoch_order


def _sgd(params):
    return torch.optim.SGD(params, lr=0.05)


def _loop(engine: str, local_epochs: int = 3, callback: pl.Callback | None = None) -> FederatedLoop:
    """A loop set up on 6 Synthetic clients (not trained), its engine ready to train cohorts."""
    torch.manual_seed(0)
    loop = FederatedLoop(client=LogisticRegression(60, 10), optimizer=_sgd, clients_per_round=6,
                         local_epochs=local_epochs, batch_size=10, seed=0, engine=engine)
    trainer = pl.Trainer(default_root_dir=tempfile.mkdtemp(prefix="lfl-"), max_epochs=0, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[copy.deepcopy(callback or FedAvg())])
    trainer.fit(loop, datamodule=SyntheticDataModule("1_1", num_clients=6, max_samples_per_client=60, seed=1))
    return loop


def _train(loop: FederatedLoop, ids: list[int], steps: list[int] | None):
    ids_t = torch.tensor(ids)
    return loop.engine.train_cohort(0, ids_t, torch.ones(len(ids), dtype=torch.long), loop.rounds.hooks,
                                    num_steps=None if steps is None else torch.tensor(steps))


@pytest.mark.parametrize("engine", ["sequential", "vectorized"])
def test_whole_epochs_of_work_equal_a_run_with_fewer_epochs(engine: str) -> None:
    # One epoch of a 3-epoch budget is exactly local_epochs = 1: same batches, same statistics.
    loop3, loop1 = _loop(engine, 3), _loop(engine, 1)
    sizes = loop3.data.train_sizes()[:4]
    per_epoch = ((sizes + 9) // 10).tolist()
    partial = _train(loop3, [0, 1, 2, 3], [per_epoch[0], 3 * per_epoch[1], 2 * per_epoch[2], per_epoch[3]])
    one = _train(loop1, [0, 1, 2, 3], None)
    for row in (0, 3):
        assert torch.equal(partial.weights[row], one.weights[row])
        assert partial.train_acc[row] == one.train_acc[row] and partial.train_loss[row] == one.train_loss[row]
    assert partial.num_steps.tolist() == [per_epoch[0], 3 * per_epoch[1], 2 * per_epoch[2], per_epoch[3]]
    assert partial.num_samples.tolist() == sizes.tolist()


def test_a_budget_inside_an_epoch_takes_exactly_those_batches() -> None:
    # Reference: plain SGD over the first 3 batches of epoch 0's permutation, loss averaged per batch.
    loop = _loop("sequential", 2)
    update = _train(loop, [2], [3])
    x, y = loop.data.client_train(2)
    model = copy.deepcopy(loop.model)
    w, b = model.linear.weight.detach().clone(), model.linear.bias.detach().clone()
    order = reference_epoch_order(0, 0, 2, 0, len(y))
    correct, loss_sum = 0, 0.0
    for step in range(3):
        index = order[step * 10 : step * 10 + 10]
        w.requires_grad_(True), b.requires_grad_(True)
        logits = x[index] @ w.T + b
        loss = torch.nn.functional.cross_entropy(logits, y[index])
        correct += int((logits.argmax(1) == y[index]).sum())
        loss_sum += float(loss.detach()) * len(index)
        gw, gb = torch.autograd.grad(loss, [w, b])
        w, b = (w - 0.05 * gw).detach(), (b - 0.05 * gb).detach()
    expected = torch.cat([w.flatten(), b])
    assert torch.allclose(update.weights[0], expected, atol=1e-6)
    assert update.num_samples.tolist() == [30] and update.num_steps.tolist() == [3]
    assert float(update.train_acc[0]) == pytest.approx(correct / 30)
    assert float(update.train_loss[0]) == pytest.approx(loss_sum / 30, rel=1e-5)


@pytest.mark.parametrize("callback", [FedAvg(), FedProx(mu=0.1), Scaffold()], ids=["FedAvg", "FedProx", "Scaffold"])
def test_engines_agree_on_partial_work(callback) -> None:
    steps = [7, 2, 5, 1, 4, 3]  # inside epochs, across epoch boundaries, unequal and out of size order
    sequential = _train(_loop("sequential", 2, callback), list(range(6)), steps)
    vectorized = _train(_loop("vectorized", 2, callback), list(range(6)), steps)
    assert sequential.num_steps.tolist() == vectorized.num_steps.tolist() == steps
    assert torch.equal(sequential.num_samples, vectorized.num_samples)
    torch.testing.assert_close(vectorized.weights, sequential.weights, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(vectorized.train_acc, sequential.train_acc)
    torch.testing.assert_close(vectorized.train_loss, sequential.train_loss, rtol=1e-5, atol=1e-7)


def test_engines_agree_under_a_deadline_through_the_trainer() -> None:
    system = {"speed_mean": 4.0, "speed_sigma": 1.0, "deadline": 2.0, "stragglers": "partial", "dropout": 0.2,
              "over_selection": 0.5}
    finals = []
    for engine in ("sequential", "vectorized"):
        torch.manual_seed(0)
        loop = FederatedLoop(client=LogisticRegression(60, 10), optimizer=_sgd, clients_per_round=4, local_epochs=2,
                             batch_size=10, seed=0, engine=engine, system=SystemHeterogeneity(**system))
        trainer = pl.Trainer(default_root_dir=tempfile.mkdtemp(prefix="lfl-"), max_epochs=4, accelerator="cpu", logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                             callbacks=[Scaffold()])
        trainer.fit(loop, datamodule=SyntheticDataModule("1_1", num_clients=10, max_samples_per_client=100))
        assert loop.system.elapsed_seconds > 0
        finals.append(loop.layout.flatten(loop.model.state_dict()))
    torch.testing.assert_close(finals[1], finals[0], rtol=1e-5, atol=1e-6)
