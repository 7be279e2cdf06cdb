"""The experiment runner: resumable runs over seeds, its files, the command line (tiny runs, a few seconds)."""

from __future__ import annotations

import csv
import json
from functools import partial
from pathlib import Path

import matplotlib.image
import pytest
import yaml

from lightning_fl.apps import compare
from lightning_fl.experiments.launcher import RunFailed
from lightning_fl.experiments import run_grid
from lightning_fl.experiments.launcher import launch
from lightning_fl.experiments.runs import FINISHED, Run, plan_runs
from tests.conftest import ROUND_CHECKPOINT, run_cli, tiny_config, write_config


def _fake_train(run: Run, trained: list[str]) -> int:
    """Stands in for training: the files a run writes, with values from its seed and config."""
    trained.append(run.name)
    value = 0.5 + 0.1 * run.seed
    (run.log_dir / "fairness_history.csv").write_text(f"stage,round,acc_mean\nval,2,{value}\ntest,2,{value}\n")
    (run.log_dir / "client_accuracy.csv").write_text(f"round,stage,client,accuracy,samples\n2,test,0,{value},5\n")
    return 0


def test_finished_runs_are_kept_and_only_missing_or_changed_ones_run_again(tmp_path):
    configs = {name: str(write_config(tmp_path / f"{name}.yaml", tiny_config(tmp_path))) for name in ("A", "B")}
    trained: list[str] = []
    grid = partial(run_grid, configs, [0, 1], tmp_path / "out", 1, launcher=partial(launch, train=partial(
        _fake_train, trained=trained)))
    grid()
    assert trained == ["A/seed_0", "B/seed_0", "A/seed_1", "B/seed_1"]  # seed by seed
    trained.clear()
    result = grid()
    assert trained == []  # every run finished: nothing is redone
    assert result.summary[("A", "acc_mean")].mean == pytest.approx(0.55)  # (0.5 + 0.6) / 2, read from the kept runs
    (tmp_path / "out" / "B" / "seed_1" / FINISHED).unlink()  # B seed 1 was interrupted
    grid()
    assert trained == ["B/seed_1"]
    trained.clear()
    # A comment, another key order or quoting: the same configuration, nothing is retrained.
    text = Path(configs["B"]).read_text()
    Path(configs["B"]).write_text("# a note on this config\n" + text.replace("lr: 0.05", "lr: 0.050  # tuned"))
    grid()
    assert trained == []
    Path(configs["A"]).write_text(Path(configs["A"]).read_text().replace("lr: 0.05", "lr: 0.1"))  # A changed
    grid()
    assert trained == ["A/seed_0", "A/seed_1"]


def test_markers_of_the_file_bytes_digest_still_match(tmp_path):
    # finished.json written before digests of the contents recorded the file's sha256.
    import hashlib
    import json

    config = write_config(tmp_path / "A.yaml", tiny_config(tmp_path))
    trained: list[str] = []
    grid = partial(run_grid, {"A": str(config)}, [0], tmp_path / "out", 1, launcher=partial(launch, train=partial(
        _fake_train, trained=trained)))
    grid()
    marker = tmp_path / "out" / "A" / "seed_0" / FINISHED
    recorded = json.loads(marker.read_text())
    recorded["config_sha256"] = hashlib.sha256(config.read_bytes()).hexdigest()
    marker.write_text(json.dumps(recorded))
    trained.clear()
    grid()
    assert trained == []


def _train_in_process(run: Run) -> int:
    return run_cli(*run.command[2:])  # drop "-m lightning_fl"


def _tiny(tmp_path: Path, name: str, callback: dict) -> str:
    config = tiny_config(tmp_path, **{"trainer.max_epochs": 2, "trainer.check_val_every_n_epoch": 1,
                                      "data.init_args.seed": 0})
    config["trainer"]["callbacks"] = [callback, {"class_path": "lightning_fl.callbacks.FairnessMetrics"},
                                      ROUND_CHECKPOINT]
    return str(write_config(tmp_path / f"{name}.yaml", config))


def test_compare_runs_configs_over_seeds_and_writes_every_file(tmp_path, capsys):
    out = tmp_path / "out"
    fedavg = _tiny(tmp_path, "fedavg", {"class_path": "lightning_fl.callbacks.FedAvg"})
    fedprox = _tiny(tmp_path, "fedprox", {"class_path": "lightning_fl.callbacks.FedProx", "init_args": {"mu": 0.1}})
    result = compare.main([f"FedAvg={fedavg}", f"FedProx={fedprox}", "--save-dir", str(out), "--seeds", "2",
                           "--jobs", "1"], launcher=partial(launch, train=_train_in_process))

    with open(out / "evaluations.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["run", "method", "seed", "round", "stage", "metric", "value"]
    metrics = {r["metric"] for r in rows}
    # 2 methods x 2 seeds x 2 rounds x 2 splits x every fairness metric.
    assert len(rows) == 2 * 2 * 2 * 2 * len(metrics) and {"acc_mean", "acc_worst20", "jain"} <= metrics
    final = {(r["method"], r["seed"]): float(r["value"]) for r in rows
             if r["stage"] == "test" and r["round"] == "2" and r["metric"] == "acc_mean"}
    fedavg_final = [final[("FedAvg", "0")], final[("FedAvg", "1")]]

    with open(out / "summary.csv") as f:
        summary = {(r["method"], r["metric"]): r for r in csv.DictReader(f)}
    row = summary[("FedAvg", "acc_mean")]
    mean = sum(fedavg_final) / 2
    std = abs(fedavg_final[0] - fedavg_final[1]) / 2 ** 0.5  # sample std of two values
    assert row["n"] == "2" and float(row["mean"]) == pytest.approx(mean) and float(row["std"]) == pytest.approx(std)
    assert float(row["ci95_high"]) == pytest.approx(mean + 12.706 * std / 2 ** 0.5, rel=1e-4)
    report = (out / "comparison.md").read_text()
    assert "over 2 seeds (0, 1; data.init_args.seed = seed)" in report and "| FedProx | 2 | 2 |" in report
    assert report in capsys.readouterr().out

    # Every run's HParams session (what TensorBoard's HParams tab shows) records its seed and data seed,
    # and its final test metric is the run's last evaluation.
    with open(out / "runs.csv") as f:
        records = {r["run"]: r for r in csv.DictReader(f)}
    for method in ("FedAvg", "FedProx"):
        for seed in (0, 1):
            record = records[f"{method}/seed_{seed}"]
            assert float(record["hparams_seed"]) == seed and float(record["hparams_data_seed"]) == seed
            assert record["hparams_problems"] == "" and record["rounds"] == "2" and float(record["seconds"]) > 0
            assert float(record["test/acc_mean"]) == pytest.approx(final[(method, str(seed))], abs=1e-6)  # float32
    assert result.configs == {"FedAvg": fedavg, "FedProx": fedprox}

    # client_accuracy.csv: the clients behind each evaluation's fairness metrics.
    run = out / "FedAvg" / "seed_1"
    with open(run / "client_accuracy.csv") as f:
        clients = list(csv.DictReader(f))
    assert len(clients) == 2 * 2 * 6  # rounds x splits x clients
    with open(run / "fairness_history.csv") as f:
        history = list(csv.DictReader(f))
    for evaluation in history:
        accs = [float(c["accuracy"]) for c in clients
                if (c["round"], c["stage"]) == (evaluation["round"], evaluation["stage"]) and float(c["samples"]) > 0]
        pooled = sum(float(c["accuracy"]) * float(c["samples"]) for c in clients if (c["round"], c["stage"]) ==
                     (evaluation["round"], evaluation["stage"]) and float(c["samples"]) > 0)
        samples = sum(float(c["samples"]) for c in clients if (c["round"], c["stage"]) ==
                      (evaluation["round"], evaluation["stage"]))
        assert sum(accs) / len(accs) == pytest.approx(float(evaluation["acc_mean"]))
        assert pooled / samples == pytest.approx(float(evaluation["acc_pooled"]))
    seeds_data = [yaml.safe_load((out / "FedAvg" / f"seed_{s}" / "config.yaml").read_text())["data"]["init_args"]["seed"]
                  for s in (0, 1)]
    assert seeds_data == [0, 1]

    for figure in ("curves.png", "client_accuracy.png"):
        image = matplotlib.image.imread(out / figure)
        assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 200


@pytest.mark.parametrize(("argv", "message"), [
    (["A=x.yaml", "--seeds", "two"], "error: seeds must be a count >= 1"),
    (["A=x.yaml", "--seeds", "0,0"], "error: seeds must be a count >= 1"),
    (["A", "--seeds", "2"], "error: runs must be name=config.yaml pairs; got 'A'"),
    (["A=missing.yaml"], "error: runs: the config of A, missing.yaml, does not exist"),
    (["A=x.yaml", "--jobs", "0"], "error: jobs must be an integer >= 1; got 0"),
])
def test_bad_arguments_stop_with_one_line_before_training(tmp_path, capsys, argv, message, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.yaml").write_text("seed_everything: 0\n")

    def must_not_train(run: Run) -> float:
        raise AssertionError("trained")

    with pytest.raises(SystemExit) as exit_info:
        compare.main([*argv, "--save-dir", str(tmp_path / "out")], launcher=must_not_train)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_a_failed_run_ends_the_comparison_with_its_log_tail_not_a_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.yaml").write_text("seed_everything: 0\n")

    def fails(run: Run) -> float:
        raise RunFailed(f"{run.method} seed {run.seed} failed (exit 2; the run directory is kept: d):\nerror: bad")

    with pytest.raises(SystemExit) as exit_info:
        compare.main(["A=x.yaml", "--seeds", "1", "--save-dir", str(tmp_path / "out")], launcher=fails)
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err == "error: A seed 0 failed (exit 2; the run directory is kept: d):\nerror: bad\n"


def test_the_progress_display_reads_the_last_round_line(tmp_path):
    from lightning_fl.experiments.progress import latest_round

    log = tmp_path / "train.log"
    assert latest_round(log) is None  # not started yet
    log.write_text("Seed set to 0\nround 1/60 (0.31 s)\nsome warning\nround 2/60 (0.30 s)\nRounds: 3%|\n")
    assert latest_round(log) == "2/60"
    log.write_text("x" * 10_000 + "\nround 17/200 (0.1 s)\n")  # only the end of a long log is read
    assert latest_round(log) == "17/200"


def test_runs_started_by_the_runner_log_a_line_per_round(tiny, monkeypatch, capsys):
    from lightning_fl.simulation.default_callbacks import ROUND_LINES_ENVIRONMENT

    config = tiny(**{"trainer.enable_progress_bar": False, "trainer.max_epochs": 3})
    assert run_cli("fit", "--config", str(config)) == 0
    assert "round 1/3" not in capsys.readouterr().out  # a user's run with bars off stays quiet
    monkeypatch.setenv(ROUND_LINES_ENVIRONMENT, "1")
    assert run_cli("fit", "--config", str(config)) == 0
    lines = [line.split(" (")[0] for line in capsys.readouterr().out.splitlines() if line.startswith("round ")]
    assert lines == ["round 1/3", "round 2/3", "round 3/3"]


def test_a_ctrl_c_between_runs_ends_in_one_line(capsys):
    from lightning_fl.experiments.launcher import command_line

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as exit_info:
        command_line(interrupted)
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == ("error: interrupted; run the same command again to go on (finished runs are"
                                       " kept)\n")
