"""GlobalTrainLoss logs the global model's loss on every client's training data."""

from __future__ import annotations

import torch

from lightning_fl.datamodules import SyntheticDataModule
from lightning_fl.models import LogisticRegression
from tests.callbacks.helpers import CHECKPOINT, events, load_last
from tests.conftest import run_cli


def test_global_train_loss_is_the_final_models_loss_on_all_training_samples(tiny, tmp_path):
    callbacks = [{"class_path": "lightning_fl.callbacks.FedAvg"},
                 {"class_path": "lightning_fl.callbacks.GlobalTrainLoss"}, CHECKPOINT]
    assert run_cli("fit", "--config", str(tiny(**{"trainer.callbacks": callbacks}))) == 0
    run = events(tmp_path)
    loss, acc = run.Scalars("train/global_loss"), run.Scalars("train/global_acc")
    assert [e.step for e in loss] == [e.step for e in acc] == [2, 4]  # every evaluation (every 2 rounds)

    # Recompute from the final model (round 4) on the same data: the tiny config's datamodule.
    datamodule = SyntheticDataModule(variant="1_1", num_clients=6, max_samples_per_client=80)
    datamodule.setup("fit")
    data = datamodule.data
    model = LogisticRegression(60, 10)
    model.load_state_dict({k.removeprefix("model."): v for k, v in load_last(tmp_path)["state_dict"].items()
                           if k.startswith("model.")})
    with torch.no_grad():
        logits = model(data.x_train)
    expected_loss = torch.nn.functional.cross_entropy(logits, data.y_train).item()
    expected_acc = (logits.argmax(1) == data.y_train).double().mean().item()
    assert abs(loss[-1].value - expected_loss) < 1e-5
    assert abs(acc[-1].value - expected_acc) < 1e-6
    # It is not the loop's train/loss (the cohort's loss while training locally).
    assert abs(run.Scalars("train/loss")[-1].value - expected_loss) > 1e-4
