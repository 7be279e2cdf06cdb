"""``validate`` and ``test`` as a Lightning user expects: a metric table, the fairness table, returned metrics."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from lightning_fl.callbacks import FedFa
from lightning_fl.datamodules import SyntheticDataModule

from lightning_fl.models import LogisticRegression
from lightning_fl.simulation.loop import FederatedLoop
from tests.callbacks.helpers import version_dir
from tests.conftest import run_cli


def test_trainer_validate_and_test_return_the_metrics(tmp_path) -> None:
    torch.manual_seed(0)
    loop = FederatedLoop(client=LogisticRegression(60, 10), clients_per_round=3, local_epochs=1, seed=0)
    data = SyntheticDataModule("1_1", num_clients=6, max_samples_per_client=80)
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", default_root_dir=tmp_path, logger=False,
                         enable_progress_bar=False, callbacks=[FedFa()])
    trainer.fit(loop, datamodule=data)
    [tested] = trainer.test(loop, datamodule=data, verbose=False)
    [validated] = trainer.validate(loop, datamodule=data, verbose=False)
    assert tested["step"] == validated["step"] == 2.0  # scored after 2 rounds
    # By hand from the per-client results: the mean of the client accuracies.
    evaluation = loop.last_evaluation
    assert evaluation.stage == "val"
    assert validated["val/acc_mean"] == pytest.approx(float((evaluation.correct / evaluation.total).mean()))
    assert set(tested) >= {"test/acc_mean", "test/acc_worst20", "test/loss"} and not any(k.startswith("val/")
                                                                                        for k in tested)


def test_cli_test_prints_lightning_s_table_and_the_fairness_table(tiny, tmp_path, capsys, caplog) -> None:
    assert run_cli("fit", "--config", str(tiny(**{"trainer.max_epochs": 2}))) == 0
    capsys.readouterr()
    checkpoint = version_dir(tmp_path, 0) / "checkpoints" / "last.ckpt"
    assert run_cli("test", "--config", str(tiny()), "--ckpt_path", str(checkpoint)) == 0
    captured = capsys.readouterr()
    out = captured.out + captured.err + caplog.text  # Lightning's table is printed, the fairness table logged
    assert "Test metric" in out and "test/acc_mean" in out
    assert "Fairness of the global model after 2 rounds (client test splits)" in out and "| FedAvg |" in out
