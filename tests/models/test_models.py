"""Client models for the real data sets: shapes, parameter counts by hand, learning, the federated loop."""

from __future__ import annotations

import pytest
import torch

from lightning_fl.faults.validation import ConfigError
from lightning_fl.models import CharLSTM, CifarCNN, ClientModule, LeNet5, PflCNN, ResNet18GN
from tests.conftest import run_cli, write_config


def conv(c_in: int, c_out: int, k: int, bias: bool = True) -> int:
    return c_in * c_out * k * k + (c_out if bias else 0)


def dense(n_in: int, n_out: int) -> int:
    return n_in * n_out + n_out


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def lstm(n_in: int, hidden: int) -> int:
    return 4 * hidden * (n_in + hidden) + 2 * 4 * hidden  # W_ih, W_hh, b_ih, b_hh


def resnet18_gn(classes: int, c_in: int = 3) -> int:
    norm = lambda c: 2 * c  # noqa: E731  (GroupNorm weight + bias)
    total = conv(c_in, 64, 3, bias=False) + norm(64)
    in_planes = 64
    for planes in (64, 128, 256, 512):
        for block in range(2):
            first = in_planes if block == 0 else planes
            total += conv(first, planes, 3, False) + norm(planes) + conv(planes, planes, 3, False) + norm(planes)
            if block == 0 and first != planes:
                total += conv(first, planes, 1, False) + norm(planes)
        in_planes = planes
    return total + dense(512, classes)


@pytest.mark.parametrize(("model", "expected", "x"), [
    (LeNet5(), conv(1, 6, 5) + conv(6, 16, 5) + dense(400, 120) + dense(120, 84) + dense(84, 10),
     torch.randn(3, 1, 28, 28)),
    (LeNet5(num_classes=7, in_channels=3, image_size=32),
     conv(3, 6, 5) + conv(6, 16, 5) + dense(400, 120) + dense(120, 84) + dense(84, 7), torch.randn(3, 3, 32, 32)),
    (CifarCNN(), conv(3, 64, 5) + conv(64, 64, 5) + dense(64 * 5 * 5, 384) + dense(384, 192) + dense(192, 10),
     torch.randn(3, 3, 32, 32)),
    (CifarCNN(padding=2, hidden=(768, 384, 192)),
     conv(3, 64, 5) + conv(64, 64, 5) + dense(64 * 8 * 8, 768) + dense(768, 384) + dense(384, 192) + dense(192, 10),
     torch.randn(3, 3, 32, 32)),
    (CharLSTM(), 80 * 8 + lstm(8, 256) + lstm(256, 256) + dense(256, 80),
     torch.randint(0, 80, (3, 80), dtype=torch.uint8)),
    (ResNet18GN(), resnet18_gn(10), torch.randn(3, 3, 32, 32)),
    (PflCNN(), conv(3, 32, 3) + conv(32, 64, 3) + dense(64 * 14 * 14, 128) + dense(128, 10), torch.randn(3, 3, 32, 32)),
], ids=["lenet5", "lenet5-rgb32", "cifar-cnn", "cifar-cnn-768", "char-lstm", "resnet18-gn", "pfl-cnn"])
def test_parameter_counts_by_hand_and_output_shapes(model, expected, x):
    assert isinstance(model, ClientModule)
    assert n_params(model) == expected
    assert tuple(x.shape[1:]) == model.input_shape
    model.eval()
    with torch.no_grad():
        assert model(x).shape == (3, model.num_classes)
    assert not list(model.buffers())  # GroupNorm/no-BN models: the flat state is exactly the parameters


def test_known_totals():
    assert n_params(LeNet5()) == 61_706 and n_params(CifarCNN()) == 797_962
    assert n_params(CharLSTM()) == 819_920 and n_params(ResNet18GN()) == 11_173_962
    # pfl-research's CIFAR-10 benchmark model (benchmark job J4), with and without its dropout layers.
    assert n_params(PflCNN()) == n_params(PflCNN(dropout=False)) == 1_626_442


@pytest.mark.parametrize("make", [
    lambda: (LeNet5(), torch.randn(16, 1, 28, 28), 0.05),
    lambda: (CifarCNN(), torch.randn(16, 3, 32, 32), 0.05),
    lambda: (PflCNN(dropout=False), torch.randn(16, 3, 32, 32), 0.01),
    lambda: (CharLSTM(hidden_size=32), torch.randint(0, 80, (16, 80), dtype=torch.uint8), 0.5),
    lambda: (ResNet18GN(image_size=16), torch.randn(8, 3, 16, 16), 0.001),
], ids=["lenet5", "cifar-cnn", "pfl-cnn", "char-lstm", "resnet18-gn"])
def test_one_training_step_reduces_the_loss_on_a_fixed_batch(make):
    torch.manual_seed(0)
    model, x, lr = make()
    y = torch.randint(0, model.num_classes, (len(x),))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    with torch.no_grad():
        before = model.loss(model(x), y)
    optimizer.zero_grad()
    model.training_step((x, y), 0).backward()
    optimizer.step()
    with torch.no_grad():
        after = model.loss(model(x), y)
    assert float(after) < float(before)


def test_char_lstm_accepts_any_integer_dtype():
    model = CharLSTM(hidden_size=8)
    x = torch.randint(0, 80, (2, 80))
    out = model(x)
    for dtype in (torch.uint8, torch.int32):
        assert torch.allclose(model(x.to(dtype)), out)


def test_invalid_arguments():
    with pytest.raises(ConfigError, match="image_size"):
        LeNet5(image_size=30)
    with pytest.raises(ConfigError, match="groups must divide 64"):
        ResNet18GN(groups=3)
    with pytest.raises(ConfigError, match="hidden_size"):
        CharLSTM(hidden_size=0)


def test_char_lstm_trains_in_the_sequential_engine_on_shakespeare_text(tmp_path):
    folder = tmp_path / "shakespeare" / "texts"
    folder.mkdir(parents=True)
    speeches = "\n\n".join(f"{'ROMEO' if i % 2 else 'JULIET'}.\n" + "O Romeo, Romeo, wherefore art thou Romeo?\n"
                           "Deny thy father and refuse thy name." for i in range(12))
    (folder / "verona_gut.txt").write_text("ACT I.\n\n" + speeches + "\n")
    config = {
        "seed_everything": 0,
        "trainer": {"max_epochs": 2, "check_val_every_n_epoch": 1, "accelerator": "cpu", "enable_model_summary": False,
                    "logger": {"class_path": "pytorch_lightning.loggers.TensorBoardLogger",
                               "init_args": {"save_dir": str(tmp_path / "logs"), "name": "run"}},
                    "callbacks": [{"class_path": "lightning_fl.callbacks.FairnessMetrics"}]},
        "model": {"client": {"class_path": "lightning_fl.models.CharLSTM", "init_args": {"hidden_size": 16}},
                  "optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.5}},
                  "clients_per_round": 2, "local_epochs": 1, "batch_size": 10, "engine": "sequential"},
        "data": {"class_path": "lightning_fl.datamodules.ShakespeareDataModule",
                 "init_args": {"data_dir": str(tmp_path), "verify_checksums": False}},
    }
    assert run_cli("fit", "--config", str(write_config(tmp_path / "c.yaml", config))) == 0
    summary = (tmp_path / "logs" / "run" / "version_0" / "fairness_summary.csv").read_text()
    assert "FedAvg" in summary
