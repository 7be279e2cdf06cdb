"""Bad input fails before training with one line; a diverging run stops and keeps its checkpoints."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import run_cli

PARTITIONS = "lightning_fl.datamodules.partitions"


def digits(partition: object) -> dict:
    """Six clients of scikit-learn digits split by ``partition`` (a YAML value)."""
    return {"class_path": "lightning_fl.datamodules.DigitsDataModule",
            "init_args": {"num_clients": 6, "partition": partition}}


@pytest.mark.parametrize(("override", "message"), [
    ({"model.clients_per_round": 40}, "clients_per_round must be between 1 and 6 (the number of clients); got 40"),
    ({"model.local_epochs": 0}, "local_epochs must be an integer >= 1; got 0"),
    ({"model.batch_size": -3}, "batch_size must be an integer >= 1; got -3"),
    ({"model.sampling": "random"}, "sampling must be one of uniform, by_samples, all; got 'random'"),
    ({"model.optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": -0.1}}},
     "optimizer.init_args.lr must be a number > 0; got -0.1"),
    ({"data": {"class_path": "lightning_fl.datamodules.SyntheticDataModule", "init_args": {"variant": "2_2"}}},
     "variant must be one of 0_0, 0.5_0.5, 1_1, iid; got '2_2'"),
    ({"data": digits({"class_path": "lightning_fl.datamodules.partitions.Zipf"})},
     "partition must be one of Dirichlet, IID, PerClientDirichlet, PowerLawClasses, Quantity, Shards"
     " (lightning_fl.datamodules.partitions, as {class_path: ..., init_args: {...}});"
     " got 'lightning_fl.datamodules.partitions.Zipf'"),
    ({"data": digits("dirichlet")},  # the old form
     "partition must be one of Dirichlet, IID, PerClientDirichlet, PowerLawClasses, Quantity, Shards"),
    ({"data": digits("Zipf")}, "got 'Zipf'"),
    ({"data": digits({"class_path": "torch.optim.SGD"})}, "got 'torch.optim.SGD'"),
    ({"data": digits({"class_path": f"{PARTITIONS}.Dirichlet", "init_args": {"alpha": -1.0}})},
     "partition.alpha must be a finite number > 0; got -1.0"),
    ({"data": digits({"class_path": f"{PARTITIONS}.Dirichlet"})}, "partition.alpha is required for Dirichlet"),
    ({"data": digits({"class_path": f"{PARTITIONS}.Dirichlet", "init_args": {"alpha": "x"}})},
     "partition.alpha of Dirichlet: Expected a <class 'float'>. Got value: x"),
    ({"data": digits({"class_path": f"{PARTITIONS}.IID", "init_args": {"alpha": 0.5}})},
     "partition.alpha is not an option of IID; its options are: none"),
    ({"data": digits({"class_path": f"{PARTITIONS}.Shards", "init_args": {"classes_per_client": 11}})},
     "partition.classes_per_client must be between 1 and 10 (the classes present in the labels); got 11"),
    ({"data": digits({"class_path": f"{PARTITIONS}.Dirichlet", "init_args": {"alpha": 0.5, "min_size": 400}})},
     "partition.min_size must be at most 299 (1797 samples over 6 clients); got 400"),
    ({"data": {"class_path": "lightning_fl.datamodules.SyntheticDataModule", "init_args": {"test_fraction": 1.5}}},
     "test_fraction"),
    ({"model.client": {"class_path": "lightning_fl.models.LogisticRegression", "init_args": {"in_features": 784}}},
     "model.client input shape (784,) does not match the data's (60,)"),
    ({"trainer.callbacks": [{"class_path": "lightning_fl.callbacks.FedProx", "init_args": {"mu": -1.0}}]},
     "mu must be a finite number >= 0; got -1.0"),
])
def test_bad_config_fails_before_training_with_one_line(tiny, tmp_path, capsys, override, message):
    assert run_cli("fit", "--config", str(tiny(**override))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and message in err[-1]
    assert not list((tmp_path / "logs").rglob("*.ckpt"))


def test_error_is_one_line_from_the_shell(tiny):
    proc = subprocess.run([sys.executable, "-m", "lightning_fl", "fit", "--config", str(tiny()),
                           "--model.clients_per_round", "7"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: clients_per_round must be between 1 and 6 (the number of clients); got 7")


def test_malformed_partition_is_one_line(tiny, capsys):
    # jsonargparse rejects it while parsing; without FederatedArgumentParser this is a 20-line report. (In
    # process: the shell's view of a parse-time error is the test above's.)
    assert run_cli("fit", "--config", str(tiny()), "--data", "lightning_fl.datamodules.DigitsDataModule",
                   "--data.partition", "Dirichlet") == 2
    assert capsys.readouterr().err.strip() == "error: partition.alpha is required for Dirichlet"


def test_other_parse_errors_keep_jsonargparse_report(tiny, capsys):
    assert run_cli("fit", "--config", str(tiny()), "--model.local_epochs", "many") == 2
    err = capsys.readouterr().err
    assert "usage:" in err and 'error: Parser key "model.local_epochs":' in err


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_divergence_names_round_and_client_and_keeps_checkpoint(tiny, tmp_path, capsys):
    config = tiny(**{"trainer.max_epochs": 2})
    assert run_cli("fit", "--config", str(config)) == 0
    last = tmp_path / "logs" / "run" / "version_0" / "checkpoints" / "last.ckpt"
    before = _digest(last)
    # Resume the good run with an absurd learning rate: round 3 (index 2) must blow up.
    code = run_cli("fit", "--config", str(config), "--trainer.max_epochs", "4", "--ckpt_path", str(last),
                   "--trainer.logger.init_args.version", "0",
                   "--model.optimizer.init_args.lr", "1e38", "--model.resume_despite_changes", "true")
    assert code == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: round 3: client ") and "diverged" in line
    assert _digest(last) == before


def test_test_and_validate_need_a_checkpoint(tiny, capsys) -> None:
    for subcommand in ("test", "validate"):
        assert run_cli(subcommand, "--config", str(tiny())) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            f"error: {subcommand} needs --ckpt_path (e.g. <run dir>/checkpoints/last.ckpt): without a checkpoint it"
            " would score the untrained initial model")


def test_predict_is_not_offered(tiny, capsys) -> None:
    assert run_cli("predict", "--config", str(tiny())) == 2
    assert "invalid choice: 'predict' (choose from 'fit', 'validate', 'test')" in capsys.readouterr().err


FAIRNESS_EVERY_0 = [{"class_path": "lightning_fl.callbacks.FedAvg"},
                    {"class_path": "lightning_fl.callbacks.FairnessMetrics", "init_args": {"histogram_every": 0}}]
LOGGED_VAL = "val/loss, val/acc_mean, val/acc_weighted"


def _monitoring(class_path: str) -> dict:
    return {"trainer.callbacks": [{"class_path": f"pytorch_lightning.callbacks.{class_path}",
                                   "init_args": {"monitor": "val/acc_mena"}}]}


@pytest.mark.parametrize(("override", "args", "message"), [
    ({}, ("--trainer.check_val_every_n_epoch", "0"),
     "trainer.check_val_every_n_epoch must be an integer >= 1 (evaluate every this many rounds); got 0"),
    ({"trainer.callbacks": FAIRNESS_EVERY_0}, (), "FairnessMetrics.histogram_every must be an integer >= 1; got 0"),
    (_monitoring("EarlyStopping"), (), f"EarlyStopping.monitor must be a metric this run logs, one of {LOGGED_VAL}"),
    (_monitoring("ModelCheckpoint"), (),
     f"ModelCheckpoint.monitor must be a metric this run logs, one of {LOGGED_VAL}"),
    ({}, ("--seed_everything", "-5"),
     "seed_everything must be an integer between 0 and 4294967295 (or true for a random seed); got -5"),
    ({}, ("--trainer.gradient_clip_val", "1.0"),
     "trainer.gradient_clip_val must be null (a round is one training step"),
    ({}, ("--trainer.accumulate_grad_batches", "2"),
     "trainer.accumulate_grad_batches must be 1 (a round is one training step of the loop"),
    ({}, ("--trainer.limit_train_batches", "0.5"), "trainer.limit_train_batches must be 1.0 (a round is one training"),
    ({}, ("--trainer.max_epochs", "0"),
     "trainer.max_epochs must be an integer >= 1 (the number of rounds; -1: no limit); got 0, which trains nothing"),
    ({"data.init_args.test_fraction": 0}, (),
     "data.test_fraction must be in (0, 1): no client has a test sample, so the run could not be evaluated; got 0.0"),
    ({}, ("--model.optimizer.init_args.lr", "nan"), "model.optimizer.init_args.lr must be a finite number; got nan"),
    ({}, ("--model.collective_timeout", "inf"), "model.collective_timeout must be a finite number; got inf"),
    ({}, ("--model.collective_timeout=-inf",), "model.collective_timeout must be a finite number; got -inf"),
])
def test_remaining_tracebacks_are_one_line_before_round_1(tiny, tmp_path, capsys, override, args, message):
    assert run_cli("fit", "--config", str(tiny(**override)), *args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Rounds:" not in err
    assert err.strip().splitlines()[-1].startswith(f"error: {message}")
    assert not list((tmp_path / "logs").rglob("*.ckpt"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_gpu_accelerator_without_a_gpu_is_one_line(tiny, capsys):
    assert run_cli("fit", "--config", str(tiny()), "--trainer.accelerator", "gpu") == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: trainer.accelerator gpu needs a device of that kind and this machine has none; use cpu or auto")


def test_an_infinite_lr_in_yaml_is_refused(tiny, capsys):
    config = tiny()
    config.write_text(config.read_text().replace("lr: 0.05", "lr: 1e400"))  # YAML reads it as inf
    assert run_cli("fit", "--config", str(config)) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: optimizer.init_args.lr must be a finite number > 0; got inf")


def test_a_monitor_the_run_logs_passes_the_check(tiny):
    callbacks = [{"class_path": "lightning_fl.callbacks.FedAvg"},
                 {"class_path": "lightning_fl.callbacks.FairnessMetrics"},
                 {"class_path": "lightning_fl.callbacks.CommunicationCost"},
                 {"class_path": "pytorch_lightning.callbacks.EarlyStopping",
                  "init_args": {"monitor": "val/acc_worst20", "mode": "max", "patience": 5}},
                 {"class_path": "pytorch_lightning.callbacks.ModelCheckpoint",
                  "init_args": {"monitor": "comm/client_total_bytes", "mode": "min"}}]
    assert run_cli("fit", "--config", str(tiny(**{"trainer.callbacks": callbacks, "trainer.max_epochs": 2}))) == 0
