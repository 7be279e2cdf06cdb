"""Preemption: SIGTERM, SIGINT and SIGUSR1 at seeded moments, then an exact resume (or one error line).

The signals are sent by the run to itself from a callback (tests.checkpoint_faults.SignalAtRound), so
each moment is exact and the runs stay in-process (about a second each).
"""

from __future__ import annotations

import json
import os
import random
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lightning_fl.faults.checkpoint_io import AtomicCheckpointIO
from tests.conftest import ROUND_CHECKPOINT, run_cli

ROUNDS = 6
REPO = Path(__file__).resolve().parents[2]


def _last(tmp_path: Path, version: int) -> Path:
    return tmp_path / "logs" / "run" / f"version_{version}" / "checkpoints" / "last.ckpt"


def _config(tiny, *faults: dict) -> Path:
    # Server momentum (FedFa) and per-client momentum on disk: state beyond the weights must resume too.
    return tiny(**{"trainer.max_epochs": ROUNDS, "trainer.check_val_every_n_epoch": 2,
                   "trainer.callbacks": [{"class_path": "lightning_fl.callbacks.FedFa"},
                                         {"class_path": "lightning_fl.callbacks.FairnessMetrics"},
                                         *faults, ROUND_CHECKPOINT],
                   "model.keep_client_optimizer_state": True, "model.client_state": "disk",
                   "model.optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.05, "momentum": 0.9}}})


def _fault(signum: int, round_idx: int, **kwargs: object) -> dict:
    return {"class_path": "tests.checkpoint_faults.SignalAtRound",
            "init_args": {"signum": int(signum), "round_idx": round_idx, **kwargs}}


def _rounds(path: Path) -> int:
    return AtomicCheckpointIO().load_checkpoint(path)["federated"]["rounds_completed"]


def _assert_same_weights(a: Path, b: Path) -> None:
    first, second = AtomicCheckpointIO().load_checkpoint(a), AtomicCheckpointIO().load_checkpoint(b)
    assert first["federated"]["rounds_completed"] == second["federated"]["rounds_completed"] == ROUNDS
    assert first["state_dict"].keys() == second["state_dict"].keys()
    for name, value in first["state_dict"].items():
        assert torch.equal(value, second["state_dict"][name]), name
    assert torch.equal(first["callbacks"]["FedFa"]["server"]["momentum"], second["callbacks"]["FedFa"]["server"]["momentum"])


def _stop_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert not any(line.startswith("Traceback") for line in lines), lines
    return lines[-1]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1])
def test_a_stop_signal_finishes_the_round_checkpoints_it_exits_128_plus_signal_and_resumes_exactly(
        signum, tiny, tmp_path, capsys):
    round_idx = random.Random(int(signum)).randrange(ROUNDS - 1)  # a seeded moment: the end of this round
    uninterrupted = _config(tiny)
    assert run_cli("fit", "--config", str(uninterrupted), "--trainer.logger.init_args.version", "0") == 0
    capsys.readouterr()

    config = _config(tiny, _fault(signum, round_idx))
    args = ["fit", "--config", str(config), "--trainer.logger.init_args.version", "1"]
    assert run_cli(*args) == 128 + signum  # 143, 130, 138: not success
    last = _last(tmp_path, 1)
    assert _rounds(last) == round_idx + 1  # the round in progress was finished and checkpointed
    resume = f"python -m lightning_fl {shlex.join(args)} --ckpt_path {last}"
    assert _stop_line(capsys) == (f"error: stopped by {signal.Signals(signum).name}; {last} holds round {round_idx + 1}"
                                  f" of {ROUNDS}; resume with: {resume}")

    assert run_cli(*shlex.split(resume)[3:]) == 0  # the printed command, as a user pastes it
    _assert_same_weights(_last(tmp_path, 0), last)


def test_a_second_signal_during_the_checkpoint_save_stops_at_once_and_keeps_the_previous_checkpoint(
        tiny, tmp_path, capsys):
    uninterrupted = _config(tiny)
    assert run_cli("fit", "--config", str(uninterrupted), "--trainer.logger.init_args.version", "0") == 0
    config = _config(tiny, _fault(signal.SIGTERM, 3, times=2, during_save=True))
    assert run_cli("fit", "--config", str(config), "--trainer.logger.init_args.version", "1") == 143
    last = _last(tmp_path, 1)
    assert _stop_line(capsys).startswith(f"error: stopped by SIGTERM; {last} holds round 3 of {ROUNDS}; resume with:")
    assert _rounds(last) == 3  # round 4's save was cut short: the file of round 3 is intact
    assert [p.name for p in last.parent.iterdir()] == ["last.ckpt"]  # no temporary file left behind
    # Resumed without the fault (it would strike round 4's save again); the run directory is the checkpoint's.
    assert run_cli("fit", "--config", str(uninterrupted), "--ckpt_path", str(last)) == 0
    _assert_same_weights(_last(tmp_path, 0), last)


def test_one_signal_during_the_save_lets_the_save_finish_and_a_duplicate_is_the_same_stop(tiny, tmp_path, capsys):
    # Sent twice at once, as when a scheduler signals every process and rank 0 passes it on as well.
    config = _config(tiny, _fault(signal.SIGTERM, 2, during_save=True, times=2, gap=0.0))
    assert run_cli("fit", "--config", str(config)) == 143
    assert _rounds(_last(tmp_path, 0)) == 3
    assert "holds round 3 of 6" in _stop_line(capsys)


def test_a_signal_before_training_starts_stops_at_once_with_one_line(tiny, tmp_path, capsys):
    config = _config(tiny, _fault(signal.SIGTERM, -1))
    assert run_cli("fit", "--config", str(config)) == 143
    assert _stop_line(capsys) == "error: stopped by SIGTERM before training started; nothing was trained or written"
    assert not _last(tmp_path, 0).exists()


def test_the_signal_handlers_are_given_back_after_the_run(tiny):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    assert run_cli("fit", "--config", str(_config(tiny)), "--trainer.max_epochs", "1") == 0
    assert {s: signal.getsignal(s) for s in before} == before


def test_resuming_a_checkpoint_that_holds_every_round_says_so_in_one_true_line(tiny, tmp_path, capsys):
    config = tiny(**{"trainer.max_epochs": 2})
    config.write_text(config.read_text().replace(
        "callbacks:", "callbacks:\n  - class_path: lightning_fl.callbacks.RoundsToTarget\n"
                      "    init_args: {monitor: val/acc_mean, target: 0.99}", 1))
    assert run_cli("fit", "--config", str(config)) == 0
    last = _last(tmp_path, 0)
    before = last.read_bytes()
    capsys.readouterr()
    assert run_cli("fit", "--config", str(config), "--ckpt_path", str(last)) == 0  # finished: not an error
    assert capsys.readouterr().err.strip() == (
        f"{last} already holds all 2 rounds of trainer.max_epochs 2; nothing to train (raise --trainer.max_epochs"
        " above 2 to train on, or evaluate it with validate/test)")
    assert run_cli("fit", "--config", str(config), "--ckpt_path", str(last), "--trainer.max_epochs", "1") == 2
    assert capsys.readouterr().err.strip() == (
        f"error: trainer.max_epochs is 1, below the 2 rounds {last} already holds; set --trainer.max_epochs above 2"
        " to train on (rounds cannot be undone)")
    assert last.read_bytes() == before  # nothing was rewritten


def test_two_processes_stop_together_after_the_round_and_resume_to_the_single_process_weights(tiny, tmp_path):
    # Every rank gets SIGTERM (as from a scheduler), and rank 0 passes it on to rank 1 too: one stop.
    overrides = {"model.engine": "sequential", "data.init_args.num_clients": 8, "model.clients_per_round": 5}
    plain = tiny(**{**overrides, "trainer.max_epochs": ROUNDS,
                    "trainer.callbacks": [{"class_path": "lightning_fl.callbacks.FedFa"}, ROUND_CHECKPOINT]})
    assert run_cli("fit", "--config", str(plain), "--trainer.logger.init_args.version", "0") == 0
    stopped = tiny(**{**overrides, "trainer.max_epochs": ROUNDS,
                      "trainer.callbacks": [{"class_path": "lightning_fl.callbacks.FedFa"},
                                            _fault(signal.SIGTERM, 2), ROUND_CHECKPOINT]})
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "lightning_fl", "fit", "--config", str(stopped),
                             "--trainer.logger.init_args.version", "1", "--trainer.strategy", "ddp",
                             "--trainer.devices", "2", "--trainer.enable_progress_bar", "false"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    last = _last(tmp_path, 1)
    assert result.returncode == 143, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: stopped by SIGTERM; {last} holds round 3 of 6;")
    assert _rounds(last) == 3
    assert run_cli("fit", "--config", str(plain), "--ckpt_path", str(last)) == 0  # on in one process
    first, second = (AtomicCheckpointIO().load_checkpoint(p)["state_dict"] for p in (_last(tmp_path, 0), last))
    assert all(torch.equal(first[name], second[name]) for name in first)


def test_slurm_auto_requeue_requeues_the_job_once_the_checkpoint_is_written(tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    from lightning_fabric.plugins.environments import SLURMEnvironment

    from lightning_fl.faults.preemption import Preemption, requeued_checkpoint

    calls = tmp_path / "scontrol_calls"
    fake = tmp_path / "bin" / "scontrol"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    last = tmp_path / "last.ckpt"
    last.write_bytes(b"a checkpoint")
    trainer = SimpleNamespace(
        is_global_zero=True, max_epochs=10, ckpt_path=None, current_epoch=3, lightning_module=None,
        default_root_dir=str(tmp_path),
        strategy=SimpleNamespace(checkpoint_io=SimpleNamespace(last_saved=last, last_saved_rounds=4)),
        _accelerator_connector=SimpleNamespace(cluster_environment=SLURMEnvironment(auto_requeue=True)))
    preemption = Preemption()
    preemption.signum, preemption.trainer = signal.SIGUSR1, trainer
    with pytest.raises(SystemExit) as stopped:
        preemption.exit(["fit", "--config", "run.yaml"])
    assert stopped.value.code == 128 + signal.SIGUSR1
    assert calls.read_text() == "requeue 4242\n"
    assert requeued_checkpoint(tmp_path) == str(last.resolve())  # where the requeued job goes on from
    monkeypatch.setenv("SLURM_JOB_ID", "4243")
    assert requeued_checkpoint(tmp_path) is None  # another job
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert capsys.readouterr().err.splitlines() == [
        f"error: stopped by SIGUSR1; {last} holds round 4 of 10; resume with: python -m lightning_fl fit --config"
        f" run.yaml --ckpt_path {last}", "SLURM job 4242 requeued"]
    preemption.signum, preemption.trainer = signal.SIGTERM, trainer  # not the requeue signal: no requeue
    with pytest.raises(SystemExit):
        preemption.exit(["fit"])
    assert calls.read_text() == "requeue 4242\n"
    assert capsys.readouterr().err.startswith(f"error: stopped by SIGTERM; {last} holds round 4 of 10;")


def test_a_requeued_slurm_job_goes_on_from_its_checkpoint_in_the_same_run_directory(tiny, tmp_path, monkeypatch):
    config = tiny(**{"trainer.max_epochs": 4, "trainer.default_root_dir": str(tmp_path)})
    assert run_cli("fit", "--config", str(config)) == 0  # uninterrupted: version_0
    stopped = _last(tmp_path, 1)
    assert run_cli("fit", "--config", str(config), "--trainer.max_epochs", "2") == 0  # version_1 stops at round 2
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    (tmp_path / ".lightning_fl_requeue_77.json").write_text(json.dumps({"ckpt_path": str(stopped)}))
    assert run_cli("fit", "--config", str(config)) == 0  # the same command, as the requeued job runs it
    assert not (tmp_path / "logs" / "run" / "version_2").exists()  # on in version_1, not a new run
    assert _rounds(stopped) == 4
    first, second = (AtomicCheckpointIO().load_checkpoint(p)["state_dict"] for p in (_last(tmp_path, 0), stopped))
    assert all(torch.equal(first[name], second[name]) for name in first)
