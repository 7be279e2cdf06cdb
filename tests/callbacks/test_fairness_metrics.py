"""FairnessMetrics' end-of-fit paper metric (SPEC section 7): IGFL's accuracy over the last 10% of rounds."""

from __future__ import annotations

import csv
from types import SimpleNamespace

import pytest
import torch

from lightning_fl.callbacks.fairness_metrics import FairnessMetrics
from lightning_fl.engines.evaluation import ClientEvaluation
from lightning_fl.faults.validation import ConfigError
from lightning_fl.simulation.loop_evaluation import EvaluationHooks
from tests.callbacks.helpers import RecordingLogger, fake_federation
from tests.conftest import run_cli


def _evaluate(cb: FairnessMetrics, stage: str, round_number: int, correct: list[int], total: list[int]) -> None:
    evaluation = ClientEvaluation(stage, round_number, torch.tensor(correct), torch.tensor(total),
                                  torch.zeros(len(total)))
    cb.on_clients_evaluated(round_number - 1, evaluation, fake_federation(num_clients=2), RecordingLogger(round_number))


def test_last_10pct_of_rounds_by_hand(tmp_path):
    cb = FairnessMetrics(histogram_every=100)
    # max_epochs 40: the last ceil(0.1 x 40) = 4 rounds are 37..40; of those, 38 and 40 were evaluated.
    _evaluate(cb, "test", 36, [0, 0], [4, 4])  # outside the window: accuracy 0 would pull the mean down
    _evaluate(cb, "test", 38, [3, 1], [4, 4])  # accuracies 0.75, 0.25: mean 0.5, pooled 4/8 = 0.5
    _evaluate(cb, "val", 40, [0, 0], [2, 2])  # validation rows do not count
    _evaluate(cb, "test", 40, [4, 2], [4, 6])  # accuracies 1, 1/3: mean 2/3, pooled 6/10 = 0.6
    trainer = SimpleNamespace(max_epochs=40, loggers=[], callback_metrics={}, log_dir=str(tmp_path), global_rank=0)
    cb.on_fit_end(trainer, None)
    mean, pooled = (0.5 + 2 / 3) / 2, (0.5 + 0.6) / 2  # 7/12 and 0.55
    assert float(trainer.callback_metrics["test/acc_mean_last10pct"]) == pytest.approx(mean)
    assert float(trainer.callback_metrics["test/acc_pooled_last10pct"]) == pytest.approx(pooled)
    summary = (tmp_path / "fairness_summary.md").read_text()
    assert summary.endswith("Last 10% of rounds (IGFL's metric; the last 4 rounds, evaluated at rounds 38, 40):"
                            " Average 58.33%, Pooled 55.00%.\n")
    with open(tmp_path / "fairness_summary.csv") as f:
        row = next(csv.DictReader(f))
    assert float(row["Average"]) == pytest.approx(2 / 3)  # the table itself is the final evaluation
    assert float(row["Average (last 10% of rounds)"]) == pytest.approx(mean)
    assert float(row["Pooled (last 10% of rounds)"]) == pytest.approx(pooled)


def test_evaluate_last_rounds_switches_to_every_round_in_the_window():
    # The callback asks (a declared attribute); the loop's evaluation hooks change the Trainer's schedule.
    def start(epoch: int, *callbacks: FairnessMetrics) -> int:
        loop = SimpleNamespace(trainer=SimpleNamespace(max_epochs=25, check_val_every_n_epoch=10, current_epoch=epoch),
                               federated_callbacks=list(callbacks))
        EvaluationHooks.on_train_epoch_start(loop)
        return loop.trainer.check_val_every_n_epoch

    # max_epochs 25: the window is the last ceil(2.5) = 3 rounds, 23..25, i.e. epochs (round index) 22..24.
    assert start(21, FairnessMetrics(evaluate_last_rounds=True)) == 10
    assert start(22, FairnessMetrics(evaluate_last_rounds=True)) == 1
    assert start(24, FairnessMetrics()) == 10


def test_evaluate_last_rounds_in_a_run(tiny, tmp_path):
    # 11 rounds, evaluation every 4: rounds 4 and 8, then every round of the window 10..11
    # (ceil(0.1 x 11) = 2); without the option round 10 would not be evaluated.
    fairness = {"class_path": "lightning_fl.callbacks.FairnessMetrics", "init_args": {"evaluate_last_rounds": True}}
    config = tiny(**{"trainer.max_epochs": 11, "trainer.check_val_every_n_epoch": 4, "model.local_epochs": 1,
                     "trainer.callbacks": [{"class_path": "lightning_fl.callbacks.FedAvg"}, fairness]})
    assert run_cli("fit", "--config", str(config)) == 0
    with open(tmp_path / "logs" / "run" / "version_0" / "fairness_history.csv") as f:
        rounds = [int(row["round"]) for row in csv.DictReader(f) if row["stage"] == "test"]
    assert rounds == [4, 8, 10, 11]


def test_evaluate_last_rounds_must_be_a_bool():
    with pytest.raises(ConfigError, match="evaluate_last_rounds must be one of False, True; got 'yes'"):
        FairnessMetrics(evaluate_last_rounds="yes")
