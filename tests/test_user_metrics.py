"""The client module's own metrics: its validation_step/test_step per client, and fairness over any of them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
import torchmetrics

from lightning_fl.callbacks import FairnessMetrics
from lightning_fl.datamodules import SyntheticDataModule
from lightning_fl.engines.evaluation import GlobalModelView, evaluate_segments
from lightning_fl.engines.user_metrics import evaluate_row_splits, evaluate_split, metric_key
from lightning_fl.faults.validation import ConfigError
from lightning_fl.models import LogisticRegression
from lightning_fl.simulation.loop import FederatedLoop
from lightning_fl.state.flat_state import FlatStateLayout


class Regression(pl.LightningModule):
    """A plain LightningModule: linear regression judged by MSE (a number and a torchmetrics object) and MAE."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 1)
        self.tm_mse = torchmetrics.MeanSquaredError()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).squeeze(-1)

    def validation_step(self, batch, batch_idx):  # noqa: ANN001, ANN201
        x, y = batch
        pred = self(x)
        self.log("val/mse", F.mse_loss(pred, y))
        self.tm_mse(pred, y)
        self.log("val/tm_mse", self.tm_mse)
        self.log_dict({"val_mae": (pred - y).abs().mean(), "val/n": float(len(y))}, reduce_fx="sum")


def _regression_data(sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(sum(sizes), 3, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3 * torch.randn(sum(sizes), generator=g)
    return x, y, torch.tensor([0, *sizes]).cumsum(0)


def test_a_plain_module_is_judged_per_client_by_what_it_logs() -> None:
    torch.manual_seed(0)
    model = Regression()
    x, y, offsets = _regression_data([5, 7, 0, 9])
    # Batches of 4 cut every client into several steps: the batch-size-weighted mean is the client's mean.
    correct, total, loss_sum, values = evaluate_split(model, "test", x, y, offsets, batch_size=4)
    assert set(values) == {"mse", "tm_mse", "mae", "n"}
    with torch.no_grad():
        for k in range(4):
            xs, ys = x[offsets[k] : offsets[k + 1]], y[offsets[k] : offsets[k + 1]]
            if not len(ys):  # no samples: no value, and left out of every statistic
                assert all(values[key][k].isnan() for key in values)
                continue
            mse = float(F.mse_loss(model(xs), ys))
            assert float(values["mse"][k]) == pytest.approx(mse, rel=1e-6)
            assert float(values["tm_mse"][k]) == pytest.approx(mse, rel=1e-6)  # reset per client
            batches = [(model(xs[s : s + 4]) - ys[s : s + 4]).abs().mean() for s in range(0, len(ys), 4)]
            assert float(values["mae"][k]) == pytest.approx(float(sum(batches)), rel=1e-6)  # reduce_fx="sum"
            assert float(values["n"][k]) == len(ys)
    assert total.tolist() == [5.0, 7.0, 0.0, 9.0]
    assert correct.isnan().all() and loss_sum.isnan().all()  # no classifier: no accuracy, no "loss" logged
    assert model.log.__func__ is pl.LightningModule.log  # log/log_dict restored after the evaluation


def test_personal_rows_are_judged_by_the_same_steps_and_the_model_is_put_back() -> None:
    torch.manual_seed(0)
    model = Regression()
    layout = FlatStateLayout(model.state_dict())
    before = layout.flatten(model.state_dict()).clone()
    rows = torch.randn(2, layout.numel)
    x, y, offsets = _regression_data([6, 3])
    splits = [(x[:6], y[:6]), (x[6:], y[6:])]
    _, _, _, values = evaluate_row_splits(model, layout, rows, "val", splits, batch_size=4)
    for i, (xs, ys) in enumerate(splits):
        weight, bias = layout.unflatten(rows[i])["linear.weight"], layout.unflatten(rows[i])["linear.bias"]
        mse = float(F.mse_loss((xs @ weight.T + bias).squeeze(-1), ys))
        assert float(values["mse"][i]) == pytest.approx(mse, rel=1e-6)
    assert torch.equal(layout.flatten(model.state_dict()), before)


def test_a_classifier_without_its_own_steps_keeps_the_fast_path_bitwise() -> None:
    torch.manual_seed(0)
    model = LogisticRegression(3, 4)
    x, offsets = torch.randn(30, 3), torch.tensor([0, 10, 25, 30])
    y = torch.randint(0, 4, (30,))
    *fast, values = evaluate_split(model, "val", x, y, offsets, batch_size=8)
    assert values == {}
    for got, want in zip(fast, evaluate_segments(model, x, y, offsets, 8)):
        assert torch.equal(got, want)


def test_stage_prefixes_are_one_metric() -> None:
    assert {metric_key(n) for n in ("val/mse", "test/mse", "val_mse", "test_mse", "mse")} == {"mse"}


class BrierClassifier(LogisticRegression):
    """A ClientModule that trains today and judges itself by its own metrics (lower-is-better MSE of the probabilities)."""

    def __init__(self) -> None:
        super().__init__(60, 10)
        self.tm_acc = torchmetrics.Accuracy(task="multiclass", num_classes=10)

    def validation_step(self, batch, batch_idx):  # noqa: ANN001, ANN201
        x, y = batch
        probs = self(x).softmax(-1)
        self.log("val/prob_mse", ((probs - F.one_hot(y, 10)) ** 2).mean())
        self.tm_acc(probs, y)
        self.log("val/tm_acc", self.tm_acc)


def _fit(tmp_path, callback: FairnessMetrics) -> tuple[FederatedLoop, SyntheticDataModule]:
    torch.manual_seed(0)
    loop = FederatedLoop(client=BrierClassifier(), clients_per_round=3, local_epochs=1, seed=0)
    data = SyntheticDataModule("1_1", num_clients=6, max_samples_per_client=80)
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", default_root_dir=tmp_path, logger=False,
                         enable_progress_bar=False, enable_checkpointing=False, callbacks=[callback])
    trainer.fit(loop, datamodule=data)
    return loop, data


def test_fit_collects_the_module_s_metrics_and_fairness_follows_the_direction(tmp_path) -> None:
    callback = FairnessMetrics(fairness_metric="val/prob_mse")  # "mse" in the name: lower is better
    loop, _ = _fit(tmp_path, callback)
    evaluation = loop.last_evaluation
    assert evaluation.stage == "test"
    x, y, offsets = loop.data.split("test")
    with torch.no_grad():
        expected = torch.tensor([float(((loop.model(x[a:b]).softmax(-1) - F.one_hot(y[a:b], 10)) ** 2).mean())
                                 for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())], dtype=torch.float64)
    assert torch.allclose(evaluation.values["prob_mse"], expected, rtol=1e-5)
    # The torchmetrics accuracy, reset per client, is the classifier pass's argmax accuracy.
    assert torch.allclose(evaluation.values["tm_acc"], evaluation.correct / evaluation.total)
    # N = 6, m = 2: the worst 20% of a lower-is-better metric are its 2 highest values.
    ordered = expected.sort().values
    row = callback.latest("test")
    assert row["prob_mse_worst20"] == pytest.approx(float(ordered[-2:].mean()), rel=1e-5)
    assert row["prob_mse_best20"] == pytest.approx(float(ordered[:2].mean()), rel=1e-5)
    assert row["acc_mean"] == pytest.approx(float((evaluation.correct / evaluation.total).mean()))  # still logged
    summary = (tmp_path / "fairness_summary.md").read_text()
    assert "Per-client prob_mse, lower is better" in summary and "Average prob_mse (lower is better)" in summary
    assert (tmp_path / "fairness_summary.csv").read_text().splitlines()[1].startswith("FedAvg,prob_mse,False,")
    assert "prob_mse_worst20" in (tmp_path / "fairness_history.csv").read_text().splitlines()[0]


def test_a_metric_the_module_never_logs_fails_before_round_1(tmp_path) -> None:
    with pytest.raises(ConfigError, match="fairness_metric 'mae'.*never logs it.*prob_mse") as err:
        _fit(tmp_path, FairnessMetrics(fairness_metric="val/mae"))
    assert "\n" not in str(err.value)
    assert not (tmp_path / "fairness_summary.md").exists()


def _setup(callback: FairnessMetrics, module: pl.LightningModule) -> None:
    x, y, _ = _regression_data([8])
    view = GlobalModelView(module, SimpleNamespace(x_train=x, y_train=y), FlatStateLayout(module.state_dict()), 64)
    callback.on_federation_setup(SimpleNamespace(aggregation="FedAvg", evaluated="global model", evaluation="",
                                                 eval_protocol=None, global_model=view))


def test_the_set_up_check_reads_what_a_plain_module_logs() -> None:
    callback = FairnessMetrics(fairness_metric="test/mse")
    _setup(callback, Regression())
    assert callback._metric == ("mse", False)  # "mse": lower is better by default
    callback = FairnessMetrics(fairness_metric="mae", higher_is_better=True)
    _setup(callback, Regression())
    assert callback._metric == ("mae", True)  # a declared direction wins
    with pytest.raises(ConfigError, match="not a classifier and logs no acc; declare one of .*: mae, mse, n, tm_mse"):
        _setup(FairnessMetrics(), Regression())
