"""FairnessMetrics' end-of-fit paper metric (SPEC section 7): IGFL's accuracy over the last 10% of rounds."""

from __future__ import annotations

import csv
from types import SimpleNamespace

import pytest
import torch
from lightning_fl.callbacks.fairness_metrics import FairnessMetrics

from lightning_fl.evaluation import ClientEvaluation
from tests.callbacks.helpers import RecordingLogger, fake_federation


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
