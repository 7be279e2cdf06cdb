"""End-to-end runs of the CLI on tiny configs: TensorBoard output, summaries, resume, precision."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import run_cli

FAIRNESS_SCALARS = ("val/acc_mean", "val/acc_weighted", "val/acc_pooled", "val/acc_worst20", "val/acc_best20",
                    "val/acc_var", "val/acc_std", "val/acc_min", "val/acc_max", "val/jain")


def _version_dir(tmp_path: Path, version: int = 0) -> Path:
    return tmp_path / "logs" / "run" / f"version_{version}"


def _events(version_dir: Path) -> EventAccumulator:
    acc = EventAccumulator(str(version_dir), size_guidance={"scalars": 0, "histograms": 0, "images": 0})
    acc.Reload()
    return acc


def _final_weights(version_dir: Path) -> dict[str, torch.Tensor]:
    ckpt = torch.load(version_dir / "checkpoints" / "last.ckpt", weights_only=False)
    return ckpt["state_dict"]


def test_fit_logs_fairness_scalars_with_round_steps(tiny, tmp_path):
    assert run_cli("fit", "--config", str(tiny())) == 0
    run = _version_dir(tmp_path)
    events = _events(run)
    tags = events.Tags()
    for name in FAIRNESS_SCALARS:
        assert name in tags["scalars"], name
        # 4 rounds evaluated every 2 rounds: steps are the round numbers 2 and 4.
        assert [e.step for e in events.Scalars(name)] == [2, 4]
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4]
    assert "val/client_acc" in tags["histograms"]
    assert "data/label_distribution_figure" not in tags["images"]  # once per data set, in its own run:
    [partition] = (tmp_path / "logs" / "partitions").iterdir()
    assert "data/label_distribution_figure" in _events(partition).Tags()["images"]
    # A second run on the same data adds no second copy of the partition.
    assert run_cli("fit", "--config", str(tiny())) == 0
    assert [p.name for p in (tmp_path / "logs" / "partitions").iterdir()] == [partition.name]
    assert len(list(partition.glob("events.out.tfevents.*"))) == 1
    for name in ("fairness_summary.md", "fairness_summary.csv", "fairness_history.csv"):
        assert (run / name).exists()
    assert "| Method | Average | Worst 20% | Best 20% | Variance |" in (run / "fairness_summary.md").read_text()
    # The logged worst-20% value agrees with an independent recomputation from the final model.
    last = events.Scalars("val/acc_worst20")[-1].value
    assert 0.0 <= last <= events.Scalars("val/acc_mean")[-1].value <= 1.0


def test_training_learns_on_synthetic(tiny, tmp_path):
    config = tiny(**{"trainer.max_epochs": 10, "trainer.check_val_every_n_epoch": 1})
    assert run_cli("fit", "--config", str(config)) == 0
    events = _events(_version_dir(tmp_path))
    acc = [e.value for e in events.Scalars("val/acc_pooled")]
    # Ten classes: chance is ~0.1 (labels are skewed, so allow the majority-class rate to be higher).
    assert acc[-1] > acc[0] and acc[-1] > 0.4


KEPT_STATE = {
    "model.keep_client_optimizer_state": True,
    "model.optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.05, "momentum": 0.9}},
    "trainer.callbacks": [{"class_path": "lightning_fl.callbacks.FedProx", "init_args": {"mu": 0.1}},
                          {"class_path": "lightning_fl.callbacks.FairnessMetrics"},
                          {"class_path": "lightning_fl.callbacks.RoundsToTarget", "init_args": {"target": 0.99}},
                          {"class_path": "pytorch_lightning.callbacks.ModelCheckpoint",
                           "init_args": {"save_last": True, "save_top_k": 0}}]}


@pytest.mark.parametrize("extra", [
    {},
    KEPT_STATE,
    {**KEPT_STATE, "model.client_state": "disk"},
    {**KEPT_STATE, "model.client_state": "disk", "model.engine": "sequential",
     "model.optimizer": {"class_path": "torch.optim.Adam", "init_args": {"lr": 0.01}}},
], ids=["fedavg", "fedprox-momentum-kept-state", "kept-state-on-disk", "adam-kept-state-on-disk-sequential"])
def test_resume_is_exact(tiny, tmp_path, extra):
    full = tiny(**extra)
    assert run_cli("fit", "--config", str(full)) == 0
    first = tiny(**{**extra, "trainer.max_epochs": 2})
    assert run_cli("fit", "--config", str(first)) == 0
    half = _version_dir(tmp_path, 1) / "checkpoints" / "last.ckpt"
    assert torch.load(half, weights_only=False)["federated"]["rounds_completed"] == 2
    assert run_cli("fit", "--config", str(full), "--ckpt_path", str(half)) == 0  # continues version_1
    uninterrupted, resumed = _final_weights(_version_dir(tmp_path, 0)), _final_weights(_version_dir(tmp_path, 1))
    for name in uninterrupted:
        assert torch.equal(uninterrupted[name], resumed[name]), name
    ckpt_a = torch.load(_version_dir(tmp_path, 0) / "checkpoints" / "last.ckpt", weights_only=False)
    ckpt_b = torch.load(_version_dir(tmp_path, 1) / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt_a["federated"]["rounds_completed"] == ckpt_b["federated"]["rounds_completed"] == 4
    assert ckpt_a["global_step"] == ckpt_b["global_step"] == 4  # one server step per round
    assert torch.equal(ckpt_a["federated"]["clients"]["participation"], ckpt_b["federated"]["clients"]["participation"])
    history_a = ckpt_a["callbacks"]["FairnessMetrics"]["server"]["history"]
    assert history_a == ckpt_b["callbacks"]["FairnessMetrics"]["server"]["history"]
    assert [(h["stage"], h["round"]) for h in history_a] == [("val", 2), ("test", 2), ("val", 4), ("test", 4)]


def test_bf16_mixed_on_cpu_keeps_fp32_global_model(tiny, tmp_path):
    assert run_cli("fit", "--config", str(tiny(**{"trainer.precision": "bf16-mixed"}))) == 0
    weights = _final_weights(_version_dir(tmp_path))
    assert all(w.dtype == torch.float32 and torch.isfinite(w).all() for w in weights.values())
    events = _events(_version_dir(tmp_path))
    assert events.Scalars("val/acc_mean")[-1].value > 0.1


def test_validate_and_test_evaluate_every_client(tiny, tmp_path):
    config = tiny()
    assert run_cli("fit", "--config", str(config)) == 0
    ckpt = _version_dir(tmp_path) / "checkpoints" / "last.ckpt"
    assert run_cli("test", "--config", str(config), "--ckpt_path", str(ckpt)) == 0
    summary = (_version_dir(tmp_path, 1) / "fairness_summary_test.md").read_text()
    assert "after 4 rounds" in summary
    fit_history = torch.load(ckpt, weights_only=False)["callbacks"]["FairnessMetrics"]["server"]["history"]
    events = _events(_version_dir(tmp_path, 1))
    # `test` evaluates the same global model on the same client test splits as the last validation.
    assert events.Scalars("test/acc_mean")[-1].value == pytest.approx(fit_history[-1]["acc_mean"], abs=1e-6)
    assert events.Scalars("test/acc_mean")[-1].step == 4
    assert run_cli("validate", "--config", str(config), "--ckpt_path", str(ckpt)) == 0


def test_early_stopping_and_checkpoint_monitor_fairness_metrics(tiny, tmp_path):
    callbacks = [
        {"class_path": "lightning_fl.callbacks.FairnessMetrics"},
        # Patience 0 on a metric that must reach 2.0 stops at the second evaluation (round 4 of 10).
        {"class_path": "pytorch_lightning.callbacks.EarlyStopping",
         "init_args": {"monitor": "val/acc_worst20", "mode": "max", "patience": 0, "stopping_threshold": 2.0,
                       "min_delta": 1.0}},
        {"class_path": "pytorch_lightning.callbacks.ModelCheckpoint",
         "init_args": {"monitor": "val/acc_mean", "mode": "max", "save_top_k": 1, "save_last": True}},
    ]
    config = tiny(**{"trainer.max_epochs": 10, "trainer.callbacks": callbacks})
    assert run_cli("fit", "--config", str(config)) == 0
    ckpt = torch.load(_version_dir(tmp_path) / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["federated"]["rounds_completed"] == 4
    best = [p for p in (_version_dir(tmp_path) / "checkpoints").iterdir() if p.name != "last.ckpt"]
    assert len(best) == 1 and "epoch=" in best[0].name
