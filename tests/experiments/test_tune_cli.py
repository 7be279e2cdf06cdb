"""``python -m lightning_fl tune``: one-line errors before training, its files, and stopping a pruned run's process."""

from __future__ import annotations

import sys
import threading
import time
from functools import partial
from pathlib import Path

import pytest
import yaml

from lightning_fl.apps import tune as tune_cli
from lightning_fl.apps.cli import main as cli_main
from lightning_fl.experiments.launcher import launch
from lightning_fl.experiments.runs import Run
from lightning_fl.experiments.tuning_runs import Pruned, stoppable_train
from tests.experiments.test_tuning import _fake_train

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
FEDAVG, QFFL = str(CONFIGS / "fedavg_synthetic.yaml"), str(CONFIGS / "qffl_synthetic.yaml")


def _must_not_train(run: Run) -> float:
    raise AssertionError(f"{run.name} trained")


@pytest.mark.parametrize(("argv", "message"), [
    ([], "error: --config: name at least one method to tune (--config NAME=config.yaml)"),
    (["--config", "FedAvg"], "error: --config must be NAME=VALUE; got 'FedAvg'"),
    (["--config", f"A={FEDAVG}", "--config", f"A={QFFL}"], "error: --config: A is named twice"),
    (["--config", "A=missing.yaml"], "error: tune: the config of A, missing.yaml, does not exist"),
    (["--config", f"A={FEDAVG}", "--seeds", "1000"],
     "error: --seeds must list at least 2 tuning seeds (e.g. 1000,1001); got '1000'"),
    (["--config", f"A={FEDAVG}", "--trials", "0"], "error: tune trials must be an integer >= 1; got 0"),
    (["--config", f"A={FEDAVG}", "--metric", "test/acc_mean"], "error: tune metric must be one of val/acc_mean,"),
    (["--config", f"A={FEDAVG}", "--objective", "B=val/acc_worst20"],
     "error: tune objective's method must be one of A; got 'B'"),
])
def test_bad_input_is_one_line_and_exit_2_before_training(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        tune_cli.main([*argv, "--save-dir", str(tmp_path)], launcher=_must_not_train)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(message)


def test_the_lightning_fl_entry_point_dispatches_tune(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main(["tune", "--config", "A=missing.yaml", "--save-dir", str(tmp_path)])
    assert exit_.value.code == 2 and "error: tune: the config of A, missing.yaml" in capsys.readouterr().err


def test_tune_writes_the_report_and_each_selected_config(tmp_path):
    result = tune_cli.main(["--config", f"FedAvg={FEDAVG}", "--config", f"q-FFL={QFFL}", "--objective",
                            "q-FFL=val/acc_worst20", "--trials", "3", "--jobs", "2", "--save-dir", str(tmp_path),
                            "--", "--trainer.max_epochs", "2"], launcher=partial(launch, train=_fake_train))
    report = (tmp_path / "tuning.md").read_text()
    assert "3 trials x 2 seeds (1000, 1001)" in report and "objective val/acc_worst20" in report
    for name in ("FedAvg", "q-FFL"):
        tuned = yaml.safe_load((tmp_path / "tuned" / f"{name}.yaml").read_text())
        assert tuned["model"]["optimizer"]["init_args"]["lr"] == result.methods[name]["selected"]["client_lr"]
        assert f"### {name}" in report and report.count("| **") >= 2
    assert set(result.methods["q-FFL"]["selected"]) == {"client_lr", "q"}


def test_a_pruned_trial_stops_its_training_process(tmp_path):
    run = Run("A", 0, tmp_path, ("-c", "import time; time.sleep(60)"))
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    started = time.perf_counter()
    with pytest.raises(Pruned):
        stoppable_train(run, stop)
    assert time.perf_counter() - started < 10  # SIGTERM ended the 60 s process
    assert (tmp_path / "train.log").is_file()
    finished = Run("B", 0, tmp_path, ("-c", "import sys; sys.exit(3)"))
    assert stoppable_train(finished, threading.Event()) == 3 and sys.executable


def test_make_compare_tune_uses_the_same_tuner_and_refuses_reporting_seeds(tmp_path, capsys):
    from lightning_fl.apps.compare import main as compare

    with pytest.raises(SystemExit) as exit_:
        compare([f"FedAvg={FEDAVG}", "--save-dir", str(tmp_path), "--seeds", "0,1", "--tune", "--tune-seeds", "1,2"],
                launcher=_must_not_train)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip() == ("error: tune seeds must not be reporting seeds; [1] are both (tuning"
                                               " seeds: [1, 2])")
    result = compare([f"FedAvg={FEDAVG}", "--save-dir", str(tmp_path), "--seeds", "1", "--rounds", "2", "--tune",
                      "--tune-trials", "2"], launcher=partial(launch, train=_fake_train))
    assert len(result.tuning.methods["FedAvg"]["trials"]) == 2 and "2 trials x 2 seeds (1000, 1001)" in result.report
    assert result.configs["FedAvg"] == str(tmp_path / "tuned" / "FedAvg.yaml")
