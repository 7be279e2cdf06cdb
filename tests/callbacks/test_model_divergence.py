"""ModelDivergence: DWFed's ||w^f - w^c|| / ||w^c|| against centralised SGD on the pooled data."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lightning_fl.functional.dwfed import model_divergence
from lightning_fl.models import LogisticRegression
from lightning_fl.simulation.centralised import CentralisedSGD, pooled_batches
from lightning_fl.state.flat_state import FlatStateLayout
from tests.callbacks.helpers import assert_cli_exits_2, events, run_with
from tests.conftest import run_cli

DIVERGENCE = {"class_path": "lightning_fl.callbacks.ModelDivergence"}


def test_model_divergence_by_hand() -> None:
    # ||(1, 2) - (1, 0)|| / ||(1, 0)|| = 2 / 1
    assert float(model_divergence(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 0.0]))) == pytest.approx(2.0)


def test_pooled_batches_cover_each_pass_once() -> None:
    batches = pooled_batches(7, 3, 5, 4)
    assert [len(b) for b in batches] == [3, 3, 1, 3, 3]
    assert sorted(torch.cat(batches[:3]).tolist()) == list(range(7))  # the first pass is a permutation
    assert all(torch.equal(a, b) for a, b in zip(batches, pooled_batches(7, 3, 5, 4)))


def test_full_batch_reference_is_gradient_descent() -> None:
    # With one batch holding every sample the order is irrelevant: each step is w <- w - lr * grad of
    # the mean cross-entropy, grad_W = (softmax(xW^T + b) - onehot)^T x / n, grad_b = column mean.
    torch.manual_seed(0)
    x, y = torch.randn(12, 4), torch.randint(0, 3, (12,))
    model = LogisticRegression(in_features=4, num_classes=3)
    layout = FlatStateLayout(model.state_dict())
    w0 = layout.flatten(model.state_dict()).clone()
    reference = CentralisedSGD(model, layout, x, y, lr=0.5, batch_size=100, seed=0)
    got = reference.advance(w0, steps=3, round_idx=0)

    [weight_name] = [n for n, p in model.state_dict().items() if p.dim() == 2]
    [bias_name] = [n for n, p in model.state_dict().items() if p.dim() == 1]
    weight, bias = model.state_dict()[weight_name].clone().double(), model.state_dict()[bias_name].clone().double()
    onehot = torch.nn.functional.one_hot(y, 3).double()
    for _ in range(3):
        error = torch.softmax(x.double() @ weight.T + bias, 1) - onehot
        weight, bias = weight - 0.5 * error.T @ x.double() / 12, bias - 0.5 * error.mean(0)
    expected = layout.flatten({weight_name: weight.float(), bias_name: bias.float()})
    assert torch.allclose(got, expected, atol=1e-6)
    assert torch.equal(layout.flatten(model.state_dict()), w0)  # the run's model is untouched


def test_one_client_full_batch_has_no_divergence(tiny, tmp_path: Path) -> None:
    # One client owning all the data, one full-batch step per round: FedAvg's global model *is*
    # centralised gradient descent, so the divergence stays at float rounding.
    assert run_with(tiny, {"class_path": "lightning_fl.callbacks.FedAvg"}, **{
        "trainer.callbacks": [{"class_path": "lightning_fl.callbacks.FedAvg"}, DIVERGENCE],
        "data.init_args.num_clients": 1, "model.clients_per_round": 1, "model.local_epochs": 1,
        "model.batch_size": 1000}) == 0
    values = [e.value for e in events(tmp_path).Scalars("server/model_divergence")]
    assert len(values) == 4 and max(values) < 1e-5


def test_non_iid_clients_diverge(tiny, tmp_path: Path) -> None:
    config = tiny(**{"trainer.callbacks": [{"class_path": "lightning_fl.callbacks.FedAvg"}, DIVERGENCE]})
    assert run_cli("fit", "--config", str(config)) == 0
    scalars = events(tmp_path).Scalars("server/model_divergence")
    assert [e.step for e in scalars] == [1, 2, 3, 4]
    assert min(e.value for e in scalars) > 1e-3


def test_bad_batch_size_is_one_line(tiny, capsys) -> None:
    assert_cli_exits_2(tiny, capsys, {**DIVERGENCE, "init_args": {"batch_size": 0}},
                       "ModelDivergence.batch_size must be an integer >= 1; got 0")
