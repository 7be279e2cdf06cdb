"""The shipped plain-LightningModule examples federated from YAML (configs/user_modules/, issue 25).

Each config runs through the CLI in-process on a few small clients; the per-client metric it reports
is recomputed here from the saved global weights with the module's own loss, and a run resumed after
2 rounds ends on bitwise the weights of 4 uninterrupted rounds.
"""

from __future__ import annotations

import csv
import math
import sys
import tempfile
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
import torchmetrics
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lightning_fl.callbacks import FairnessMetrics, FedAvg
from lightning_fl.datamodules import (FederatedData, FederatedDataModule, ShakespeareDataModule, SyntheticDataModule,
                                      SyntheticRegressionDataModule)
from lightning_fl.models.examples import CharPerplexity, LinearRegression, SmoothedClassifier
from lightning_fl.simulation.loop import FederatedLoop
from lightning_fl.state.data import offsets_from_sizes
from tests.conftest import run_cli, skip_without_data
from tests.datamodules.test_real_configs import data_present

REPO = Path(__file__).resolve().parents[1]
#: Small federations for each config: (overrides of the shipped config, metric the fairness table reports).
SMALL = {
    "regression": ({"data.init_args.num_clients": 5, "model.clients_per_round": 3}, "mse"),
    "smoothed_classifier": ({"data.init_args.num_clients": 5, "data.init_args.max_samples_per_client": 60,
                             "model.clients_per_round": 3}, "acc"),
    # The perplexity config on this file's random characters, so its resume runs without the Shakespeare texts.
    "random_characters": ({"data": {"class_path": "tests.test_user_objectives._RandomCharacters"},
                           "model.clients_per_round": 3, "model.client.init_args.hidden_size": 8}, "perplexity"),
    "shakespeare_perplexity": ({"data.init_args.data_dir": str(REPO / "data"), "data.init_args.plays": ["hamlet"],
                                "data.init_args.max_clients": 3, "data.init_args.max_samples_per_client": 40,
                                "model.clients_per_round": 3, "model.client.init_args.hidden_size": 16},
                               "perplexity"),
}


def _config(tmp_path: Path, name: str, rounds: int, run: str = "run") -> Path:
    shipped = "shakespeare_perplexity" if name == "random_characters" else name
    config = yaml.safe_load((REPO / "configs" / "user_modules" / f"{shipped}.yaml").read_text())
    overrides = {**SMALL[name][0], "trainer.max_epochs": rounds, "trainer.check_val_every_n_epoch": 2,
                 "trainer.enable_progress_bar": False, "trainer.logger.init_args.save_dir": str(tmp_path),
                 "trainer.logger.init_args.name": run}
    for dotted, value in overrides.items():
        node = config
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node[key]
        node[leaf] = value
    path = tmp_path / f"{run}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _weights(tmp_path: Path, run: str = "run", rounds: int = 2) -> dict[str, torch.Tensor]:
    checkpoint = torch.load(tmp_path / run / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["epoch"] + 1 == rounds  # Lightning counts epochs (rounds) from 0
    return {k.removeprefix("model."): v for k, v in checkpoint["state_dict"].items() if k.startswith("model.")}


def _reported(tmp_path: Path, metric: str) -> dict[str, float]:
    rows = list(csv.DictReader((tmp_path / "run" / "version_0" / "fairness_history.csv").open()))
    test = [row for row in rows if row["stage"] == "test"][-1]
    return {key: float(test[f"{metric}_{key}"]) for key in ("mean", "min", "max", "var")}


def _per_client_test(module: torch.nn.Module, datamodule, score) -> torch.Tensor:
    """``score(logits_or_predictions, y)`` of every client's test split, written out with plain torch."""
    datamodule.setup()
    with torch.no_grad():
        return torch.tensor([float(score(module(x), y)) for x, y in
                             (datamodule.data.client_test(k) for k in range(datamodule.num_clients))])


def _check_reported(tmp_path: Path, metric: str, per_client: torch.Tensor) -> None:
    reported = _reported(tmp_path, metric)
    assert reported["mean"] == pytest.approx(float(per_client.mean()), rel=1e-5)
    assert reported["min"] == pytest.approx(float(per_client.min()), rel=1e-5)
    assert reported["max"] == pytest.approx(float(per_client.max()), rel=1e-5)
    # Population variance; a module's own accuracy (a fraction) in percent^2, as the built-in acc_var and
    # FedFa's Table 2, so the Variance column means one thing for every classifier.
    scale = 100.0 ** 2 if metric == "acc" else 1.0
    assert reported["var"] == pytest.approx(scale * float(per_client.double().var(unbiased=False)), rel=1e-5)


def test_regression_data_has_float_targets_and_no_labels() -> None:
    small, large = SyntheticRegressionDataModule(num_clients=2), SyntheticRegressionDataModule(num_clients=4)
    small.setup()
    assert small.data.y_train.dtype == torch.float32 and small.data.y_train.shape[1:] == (1,)
    assert small.num_classes == 0 and small.label_histograms().shape == (2, 0)
    assert torch.equal(small.client_samples(1)[1], large.client_samples(1)[1])  # independent of the federation size
    # The noise is the only part a per-client least-squares fit cannot explain (noise 0.1, 60 samples, 10 features).
    x, y = SyntheticRegressionDataModule(noise=0.1).client_samples(3)
    residual = y - x @ torch.linalg.lstsq(x, y).solution
    assert 0.05 < float(residual.std()) < 0.15


def test_label_weighted_aggregation_refuses_regression_data(tmp_path, capsys) -> None:
    path = _config(tmp_path, "regression", rounds=1)
    config = yaml.safe_load(path.read_text())
    config["trainer"]["callbacks"][0] = {"class_path": "lightning_fl.callbacks.DWFed"}
    path.write_text(yaml.safe_dump(config))
    assert run_cli("fit", "--config", str(path)) != 0
    assert "error: DWFed weights clients by their label distributions" in capsys.readouterr().err


@pytest.mark.parametrize("engine", ["vectorized", "sequential"])
def test_regression_reports_each_clients_mse(tmp_path, engine) -> None:
    # Float targets go through both engines' batching and the evaluation's per-client splits.
    assert run_cli("fit", "--config", str(_config(tmp_path, "regression", rounds=2)), "--model.engine", engine) == 0
    module = LinearRegression(in_features=10)
    module.load_state_dict(_weights(tmp_path))
    datamodule = SyntheticRegressionDataModule(num_clients=5, samples_per_client=60, num_features=10)
    per_client = _per_client_test(module, datamodule, lambda p, y: ((p - y) ** 2).mean())
    _check_reported(tmp_path, "mse", per_client)
    # TensorBoard shows the declared metric's spread over the clients as a histogram per evaluation.
    events = EventAccumulator(str(tmp_path / "run" / "version_0"), size_guidance={"histograms": 0})
    last = events.Reload().Histograms("test/client_mse")[-1].histogram_value
    assert (last.num, last.min, last.max) == (5, pytest.approx(float(per_client.min()), rel=1e-5),
                                              pytest.approx(float(per_client.max()), rel=1e-5))


def test_smoothed_classifier_reports_each_clients_accuracy(tmp_path) -> None:
    assert run_cli("fit", "--config", str(_config(tmp_path, "smoothed_classifier", rounds=2))) == 0
    module = SmoothedClassifier(in_features=60, num_classes=10, hidden=32)
    module.load_state_dict(_weights(tmp_path), strict=False)  # the torchmetrics objects hold no weights
    datamodule = SyntheticDataModule("1_1", num_clients=5, max_samples_per_client=60)
    _check_reported(tmp_path, "acc", _per_client_test(module, datamodule,
                                                      lambda p, y: (p.argmax(1) == y).double().mean()))


def test_perplexity_is_exp_of_the_mean_cross_entropy_over_a_clients_batches() -> None:
    # Runs without the Shakespeare texts: the module's own metric on random characters, in batches of 7, so
    # a per-batch exp averaged over batches (not exp of the mean over all characters) fails.
    from lightning_fl.engines.user_metrics import evaluate_steps

    torch.manual_seed(0)
    module = CharPerplexity(hidden_size=8)
    x, y = torch.randint(0, 80, (30, 12), dtype=torch.uint8), torch.randint(0, 80, (30,))
    logged = evaluate_steps(module, "val", {0: (x[:20], y[:20]), 1: (x[20:], y[20:])}, batch_size=7)
    with torch.no_grad():
        expected = [math.exp(float(F.cross_entropy(module(x[s]), y[s]))) for s in (slice(0, 20), slice(20, 30))]
    assert [logged[k]["perplexity"] for k in (0, 1)] == pytest.approx(expected, rel=1e-5)


class _RandomCharacters(FederatedDataModule):
    """Three clients of random 12-character windows (uint8, as the Shakespeare datamodule stores them)."""

    def build_data(self) -> FederatedData:
        g = torch.Generator().manual_seed(0)
        x, y = torch.randint(0, 80, (90, 12), generator=g).to(torch.uint8), torch.randint(0, 80, (90,), generator=g)
        return FederatedData(x[:60], y[:60], offsets_from_sizes([20, 20, 20]), x[60:], y[60:],
                             offsets_from_sizes([10, 10, 10]), num_classes=80)


def test_char_model_federates_and_reports_each_clients_perplexity_without_the_texts() -> None:
    torch.manual_seed(0)
    fairness = FairnessMetrics(fairness_metric="perplexity", higher_is_better=False)
    loop = FederatedLoop(client=CharPerplexity(hidden_size=8), clients_per_round=3, batch_size=10, seed=0)
    trainer = pl.Trainer(default_root_dir=tempfile.mkdtemp(prefix="lfl-"), max_epochs=2, accelerator="cpu",
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, callbacks=[FedAvg(), fairness])
    datamodule = _RandomCharacters(val_fraction=0)
    trainer.fit(loop, datamodule=datamodule)
    module = CharPerplexity(hidden_size=8)
    module.load_state_dict(loop.model.state_dict())
    per_client = _per_client_test(module, datamodule, lambda p, y: math.exp(float(F.cross_entropy(p, y))))
    row = fairness.latest("test")
    assert row["round"] == 2
    assert [row["perplexity_mean"], row["perplexity_min"], row["perplexity_max"]] == pytest.approx(
        [float(per_client.mean()), float(per_client.min()), float(per_client.max())], rel=1e-5)


def test_shakespeare_reports_each_roles_perplexity(tmp_path) -> None:
    reason = data_present("ShakespeareDataModule")
    skip_without_data(reason is None, reason or "")
    assert run_cli("fit", "--config", str(_config(tmp_path, "shakespeare_perplexity", rounds=2))) == 0
    module = CharPerplexity(vocab_size=80, hidden_size=16)
    module.load_state_dict(_weights(tmp_path), strict=False)
    datamodule = ShakespeareDataModule(data_dir=str(REPO / "data"), plays=["hamlet"], min_samples=64,
                                       max_clients=3, max_samples_per_client=40, test_fraction=0.2, seed=0)
    _check_reported(tmp_path, "perplexity", _per_client_test(
        module, datamodule, lambda p, y: math.exp(float(F.cross_entropy(p, y)))))


@pytest.mark.parametrize("name", ["regression", "smoothed_classifier", "random_characters"])
def test_two_plus_two_rounds_equal_four(tmp_path, name) -> None:
    assert run_cli("fit", "--config", str(_config(tmp_path, name, rounds=4, run="whole"))) == 0
    halves = _config(tmp_path, name, rounds=4, run="halves")
    assert run_cli("fit", "--config", str(halves), "--trainer.max_epochs", "2") == 0
    assert run_cli("fit", "--config", str(halves), "--ckpt_path", "last") == 0
    whole, resumed = _weights(tmp_path, "whole", rounds=4), _weights(tmp_path, "halves", rounds=4)
    assert whole.keys() == resumed.keys() and all(torch.equal(whole[k], resumed[k]) for k in whole)


def test_the_readme_module_and_yaml_run_as_written(tmp_path, monkeypatch) -> None:
    # README, "Federate your own LightningModule": its module file and YAML lines, verbatim, on a copy of
    # the regression config; the reported per-client mae is recomputed from the saved weights.
    section = (REPO / "README.md").read_text().split("## Federate your own LightningModule", 1)[1].split("\n## ", 1)[0]
    module_code = section.split("```python\n", 1)[1].split("```", 1)[0]
    lines = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    (tmp_path / "mymodule.py").write_text(module_code)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = _config(tmp_path, "regression", rounds=2)
    config = yaml.safe_load(path.read_text())
    config["model"]["client"] = lines["model"]["client"]
    config["trainer"]["callbacks"] = [lines["trainer"]["callbacks"][0] if "FairnessMetrics" in c["class_path"] else c
                                      for c in config["trainer"]["callbacks"]]
    path.write_text(yaml.safe_dump(config))
    assert run_cli("fit", "--config", str(path)) == 0
    module = sys.modules.pop("mymodule").MyNet(in_features=10)  # imported by the CLI; not left to other tests
    module.load_state_dict(_weights(tmp_path))
    datamodule = SyntheticRegressionDataModule(num_clients=5, samples_per_client=60, num_features=10)
    _check_reported(tmp_path, "mae", _per_client_test(module, datamodule, lambda p, y: (p - y).abs().mean()))


def test_a_clients_torchmetrics_value_never_syncs_across_processes() -> None:
    # Under torch.distributed torchmetrics' compute() would all-gather every rank's states into one value;
    # a metric that claims a process group and fails on any gather stands in for the other rank here.
    from lightning_fl.engines.user_metrics import evaluate_steps

    def gather(*args, **kwargs):
        raise AssertionError("a client's metric was synced across processes")

    torch.manual_seed(0)
    module = SmoothedClassifier(in_features=4, num_classes=3, hidden=5)
    module.val_acc = torchmetrics.Accuracy(task="multiclass", num_classes=3, distributed_available_fn=lambda: True,
                                           dist_sync_fn=gather)
    x, y = torch.randn(12, 4), torch.arange(12) % 3
    logged = evaluate_steps(module, "val", {0: (x[:5], y[:5]), 1: (x[5:], y[5:])}, batch_size=4)
    with torch.no_grad():
        expected = [float((module(x[s]).argmax(1) == y[s]).double().mean()) for s in (slice(0, 5), slice(5, 12))]
    assert [logged[k]["acc"] for k in (0, 1)] == pytest.approx(expected)
