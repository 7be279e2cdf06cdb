"""`make stragglers`' runner: the seed loop, resuming, result files and the aggregation across seeds."""

from __future__ import annotations

import csv
import json
from functools import partial
from pathlib import Path

import matplotlib.image
import pytest

from lightning_fl.apps import stragglers
from lightning_fl.apps.stragglers import Run, aggregate, launch, markdown_table, parse_seeds, tail_means
from tests.conftest import run_cli

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "stragglers"
# 8 clients of at most 40 samples, 6 per round (round(0.9 x 6) = 5 stragglers, one kept), 1 local epoch.
TINY = ["--model.clients_per_round", "6", "--model.local_epochs", "1", "--data.init_args.num_clients", "8",
        "--data.init_args.max_samples_per_client", "40", "--trainer.enable_model_summary", "false"]


def _train_in_process(run: Run) -> int:
    return run_cli(*run.command[2:])  # drop "-m lightning_fl"


def test_pipeline_writes_csv_table_and_figure_and_skips_finished_runs(tmp_path, capsys):
    out = tmp_path / "out"
    argv = [f"FedAvg-drop={CONFIGS / 'fedavg_drop.yaml'}", f"FedProx-mu1-partial={CONFIGS / 'fedprox_partial.yaml'}",
            "--save-dir", str(out), "--seeds", "2", "--rounds", "2", "--jobs", "1", "--", *TINY]
    stragglers.main(argv, launcher=partial(launch, train=_train_in_process))

    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert set(rows[0]) == {"method", "seed", "round", "metric", "value"}
    # 2 methods x 2 seeds x 2 rounds (evaluated every round) x every metric.
    assert len(rows) == 2 * 2 * 2 * len(stragglers.METRICS)
    assert {r["method"] for r in rows} == {"FedAvg-drop", "FedProx-mu1-partial"}
    assert {r["seed"] for r in rows} == {"0", "1"} and {r["round"] for r in rows} == {"1", "2"}
    assert set(stragglers.METRICS) == {r["metric"] for r in rows}
    accuracies = [float(r["value"]) for r in rows if r["metric"] == "test_acc"]
    assert all(0.0 <= a <= 1.0 for a in accuracies)

    report = (out / "results.md").read_text()
    assert "90% stragglers, 2 seeds (0, 1), 2 rounds" in report
    assert report.count("| Method | round 2 | last 10 rounds |") == 2
    assert "| FedAvg-drop | " in report and "| FedProx-mu1-partial | " in report
    assert report in capsys.readouterr().out

    image = matplotlib.image.imread(out / "curves.png")
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    for method in ("FedAvg-drop", "FedProx-mu1-partial"):
        for seed in (0, 1):
            marker = json.loads((out / method / f"seed_{seed}" / "finished.json").read_text())
            assert marker["command"][marker["command"].index("--seed_everything") + 1] == str(seed)

    def must_not_train(run: Run) -> float:
        raise AssertionError(f"{run.method} seed {run.seed} was finished and ran again")

    stragglers.main(argv, launcher=must_not_train)  # resumable: nothing is redone
    assert capsys.readouterr().out.count("finished before, kept") == 4
    with open(out / "results.csv") as f:
        assert len(list(csv.DictReader(f))) == len(rows)


def test_a_changed_command_or_an_unfinished_run_is_run_again(tmp_path):
    config = str(CONFIGS / "fedavg_drop.yaml")
    run, = stragglers.plan_runs({"FedAvg-drop": config}, [0], tmp_path, ["--trainer.max_epochs", "1", *TINY])
    assert not stragglers.is_finished(run)
    (run.log_dir / "stale").mkdir(parents=True)  # what an interrupted attempt leaves
    launch(run, train=_train_in_process)
    assert stragglers.is_finished(run) and not (run.log_dir / "stale").exists()
    longer, = stragglers.plan_runs({"FedAvg-drop": config}, [0], tmp_path, ["--trainer.max_epochs", "2", *TINY])
    assert longer.log_dir == run.log_dir and not stragglers.is_finished(longer)


def test_a_failed_run_raises_with_the_end_of_its_log(tmp_path):
    run, = stragglers.plan_runs({"broken": str(CONFIGS / "fedavg_drop.yaml")}, [0], tmp_path,
                                ["--model.clients_per_round", "0"])
    with pytest.raises(RuntimeError, match="broken seed 0 failed"):
        launch(run)  # a real subprocess: the CLI rejects the config in about a second
    assert "clients_per_round" in (run.log_dir / "train.log").read_text()
    assert not stragglers.is_finished(run)


def test_parse_seeds():
    assert parse_seeds("3") == [0, 1, 2]
    assert parse_seeds("0,4,7") == [0, 4, 7]
    assert parse_seeds("5,") == [5]


ROWS = [  # (method, seed, round, metric, value): three seeds of A, one of B
    ("A", 0, 1, "loss", 1.0), ("A", 1, 1, "loss", 2.0), ("A", 2, 1, "loss", 6.0),
    ("A", 0, 2, "loss", 0.5), ("A", 1, 2, "loss", 0.5), ("A", 2, 2, "loss", 2.0),
    ("B", 0, 1, "loss", 4.0), ("B", 0, 2, "loss", 3.0),
]


def test_aggregate_across_seeds_matches_hand_computed_mean_and_sample_std():
    table = aggregate(ROWS)
    a1 = table[("A", "loss", 1)]
    # mean (1 + 2 + 6) / 3 = 3; squared deviations 4 + 1 + 9 = 14; sample variance 14 / 2 = 7.
    assert a1.mean == pytest.approx(3.0) and a1.std == pytest.approx(7.0 ** 0.5)
    assert (a1.min, a1.max, a1.n) == (1.0, 6.0, 3)
    a2 = table[("A", "loss", 2)]
    # mean 1; deviations 0.25 + 0.25 + 1 = 1.5; sample variance 0.75.
    assert a2.mean == pytest.approx(1.0) and a2.std == pytest.approx(0.75 ** 0.5)
    assert table[("B", "loss", 2)].std == 0.0 and table[("B", "loss", 2)].n == 1  # one seed: no spread
    # Per-seed means over the last 2 rounds: A 0.75, 1.25, 4.0 -> mean 2.0, sample variance
    # (1.5625 + 0.5625 + 4.0) / 2 = 3.0625.
    tails = tail_means(ROWS, last=2)
    assert tails[("A", "loss")].mean == pytest.approx(2.0) and tails[("A", "loss")].std == pytest.approx(1.75)
    assert tails[("B", "loss")].mean == pytest.approx(3.5)


def test_markdown_table_prints_mean_and_std_per_round():
    table = markdown_table(ROWS, "loss", rounds=[1, 2], last=2, digits=2)
    assert table.splitlines() == [
        "| Method | round 1 | round 2 | last 2 rounds |",
        "| :--- | ---: | ---: | ---: |",
        "| A | 3.00 ± 2.65 | 1.00 ± 0.87 | 2.00 ± 1.75 |",
        "| B | 4.00 ± 0.00 | 3.00 ± 0.00 | 3.50 ± 0.00 |",
    ]
