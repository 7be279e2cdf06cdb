"""``model.eval.rounds`` and ``paper_compat: max_test`` in the final table (docs/personalization.md, Which rounds).

Short Ditto runs on Synthetic(1,1), evaluated every round; the expected numbers are recomputed here from
the run's own ``fairness_history.csv``, independently of the selection code.
"""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import CSVLogger

from lightning_fl.callbacks import Ditto, FairnessMetrics
from lightning_fl.datamodules import SyntheticDataModule
from lightning_fl.engines.evaluation import ClientEvaluation
from lightning_fl.faults.validation import ConfigError
from lightning_fl.models import MLP
from lightning_fl.personalization import EvalProtocol
from lightning_fl.simulation.loop import FederatedLoop
from tests.callbacks.helpers import RecordingLogger, fake_federation

ROUNDS, N = 5, 6
#: fairness_summary.csv column -> fairness_history.csv key.
COLUMNS = {"Average": "acc_mean", "Worst 20%": "acc_worst20", "Best 20%": "acc_best20", "Variance": "acc_var"}


def _fit(protocol: EvalProtocol, val_fraction: float = 0.2) -> tuple[pl.Trainer, Path]:
    torch.manual_seed(0)
    loop = FederatedLoop(client=MLP(60, 10, hidden=(8,)), optimizer=lambda p: torch.optim.SGD(p, lr=0.1),
                         clients_per_round=N, sampling="all", local_epochs=1, batch_size=10, seed=1, eval=protocol)
    root = tempfile.mkdtemp(prefix="lfl-")
    trainer = pl.Trainer(default_root_dir=root, max_epochs=ROUNDS, accelerator="cpu", logger=CSVLogger(root),
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, callbacks=[Ditto(), FairnessMetrics()])
    trainer.fit(loop, datamodule=SyntheticDataModule("1_1", num_clients=N, max_samples_per_client=40,
                                                     val_fraction=val_fraction))
    return trainer, Path(trainer.log_dir)


def _history(run: Path, stage: str) -> list[dict[str, float]]:
    with open(run / "fairness_history.csv") as f:
        return [{k: float(v) for k, v in row.items() if k != "stage"} for row in csv.DictReader(f)
                if row["stage"] == stage]


def _summary(run: Path) -> dict[str, float]:
    with open(run / "fairness_summary.csv") as f:
        row = next(csv.DictReader(f))
    return {COLUMNS[k]: float(v) for k, v in row.items() if k in COLUMNS}


def _first_argmax(rows: list[dict[str, float]], key: str) -> int:
    best = max(row[key] for row in rows)
    return next(int(row["round"]) for row in rows if row[key] == best)


def test_mean_last_averages_each_statistic_over_the_last_r_evaluations() -> None:
    _, run = _fit(EvalProtocol(model="personal", rounds="mean_last", last_r=2))
    tests = _history(run, "test")
    assert [int(row["round"]) for row in tests] == list(range(1, ROUNDS + 1))  # every round evaluated
    window = tests[-2:]
    for key, value in _summary(run).items():
        assert value == pytest.approx((window[0][key] + window[1][key]) / 2, rel=1e-12)
    title = (run / "fairness_summary.md").read_text().splitlines()[0]
    assert title == (f"Personal models after {ROUNDS} rounds, each statistic averaged over the last 2 evaluations"
                     f" (rounds=mean_last(2): rounds {ROUNDS - 1}, {ROUNDS}) (client test splits).")


def test_best_val_reports_the_test_row_at_the_first_val_maximiser_and_max_test_only_test_optimistic() -> None:
    trainer, run = _fit(EvalProtocol(model="personal", rounds="best_val", weighting="pooled", paper_compat="max_test"))
    tests = _history(run, "test")
    t_star = _first_argmax(_history(run, "val"), "acc_pooled")  # weighting pooled: val/acc_pooled is monitored
    at_t_star = next(row for row in tests if int(row["round"]) == t_star)
    assert _summary(run) == pytest.approx({key: at_t_star[key] for key in COLUMNS.values()}, rel=1e-12)
    summary = (run / "fairness_summary.md").read_text()
    assert f"taken at round {t_star} (rounds=best_val: the first evaluation maximising val/acc_pooled)" in summary

    # paper_compat: max_test: the best test/acc_pooled evaluation, under test_optimistic/* and nowhere else.
    t_max = _first_argmax(tests, "acc_pooled")
    best = next(row for row in tests if int(row["round"]) == t_max)
    metrics = trainer.callback_metrics
    for key in ("acc_mean", "acc_pooled", "acc_worst20", "jain"):
        assert float(metrics[f"test_optimistic/{key}"]) == pytest.approx(best[key], rel=1e-6)
    assert float(metrics["test_optimistic/round"]) == t_max
    assert float(metrics["test/acc_pooled"]) == pytest.approx(tests[-1]["acc_pooled"], rel=1e-6)  # still the last
    assert f"Optimistic, not a result (paper_compat: max_test; the round was chosen on the test split, the best" \
           f" test/acc_pooled at round {t_max}; logged as test_optimistic/* only)" in summary
    with open(run / "metrics.csv") as f:
        logged = list(csv.DictReader(f))
    optimistic = [row for row in logged if row.get("test_optimistic/acc_pooled")]
    assert len(optimistic) == 1 and float(optimistic[0]["test_optimistic/acc_pooled"]) == pytest.approx(
        best["acc_pooled"], rel=1e-6)
    # The row logged at the end of fit carries nothing under test/*: the per-round test/* scalars are untouched.
    assert not any(value for key, value in optimistic[0].items() if key.startswith("test/"))
    test_pooled = [float(row["test/acc_pooled"]) for row in logged if row.get("test/acc_pooled")]
    assert test_pooled == pytest.approx([row["acc_pooled"] for row in tests], rel=1e-6)


def test_best_val_without_validation_splits_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="model.eval.rounds: best_val") as caught:
        _fit(EvalProtocol(model="personal", rounds="best_val"), val_fraction=0.0)
    assert "\n" not in str(caught.value)


def _evaluate(cb: FairnessMetrics, stage: str, t: int, correct: list[int]) -> None:
    evaluation = ClientEvaluation(stage, t, torch.tensor(correct), torch.tensor([4, 4]), torch.zeros(2))
    cb.on_clients_evaluated(t - 1, evaluation, fake_federation(num_clients=2), RecordingLogger(t))


def test_best_val_keeps_the_first_of_tied_val_rounds_by_hand(tmp_path) -> None:
    cb = FairnessMetrics(histogram_every=100)
    cb.on_federation_setup(SimpleNamespace(aggregation="Ditto", evaluated="personal models", evaluation="",
                                           eval_protocol=EvalProtocol(rounds="best_val")))
    # val acc_mean: 0.25, 0.75, 0.5, 0.75 -> t* = 2 (round 4 ties, and has the best test accuracy)
    for t, val, test in ((1, [1, 1], [1, 1]), (2, [3, 3], [2, 1]), (3, [2, 2], [3, 3]), (4, [3, 3], [4, 4])):
        _evaluate(cb, "val", t, val)
        _evaluate(cb, "test", t, test)
    trainer = SimpleNamespace(max_epochs=4, loggers=[], callback_metrics={}, log_dir=str(tmp_path), global_rank=0)
    cb.on_fit_end(trainer, None)
    assert _summary(tmp_path) == pytest.approx({"acc_mean": 0.375, "acc_worst20": 0.25, "acc_best20": 0.5,
                                                "acc_var": 156.25})
    assert not any(name.startswith("test_optimistic/") for name in trainer.callback_metrics)  # not declared
