"""Every round is checkpointed: shipped configs, a diverged run, and kill -9 followed by an exact resume."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
import yaml

from lightning_fl.faults.checkpoint_io import AtomicCheckpointIO
from tests.conftest import ROUND_CHECKPOINT, run_cli

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "configs").glob("**/*.yaml"))


def _last(tmp_path: Path, version: int) -> Path:
    return tmp_path / "logs" / "run" / f"version_{version}" / "checkpoints" / "last.ckpt"


def _callbacks(*extra: dict) -> list[dict]:
    return [{"class_path": "lightning_fl.callbacks.FedFa"}, {"class_path": "lightning_fl.callbacks.FairnessMetrics"},
            *extra, ROUND_CHECKPOINT]


def test_every_shipped_config_saves_last_ckpt_every_round() -> None:
    checkpointed = 0
    for config in CONFIGS:
        trainer = yaml.safe_load(config.read_text())["trainer"]
        checkpoints = [c for c in trainer.get("callbacks", []) if c["class_path"].endswith("ModelCheckpoint")]
        assert trainer.get("enable_checkpointing") is not False, config
        assert checkpoints == [ROUND_CHECKPOINT], config
        checkpointed += 1
    assert checkpointed == len(CONFIGS) >= len([*(REPO / "configs").glob("*.yaml"),
                                                *(REPO / "configs" / "experiments").glob("*.yaml")])


def test_round_checkpoint_holds_every_completed_round(tiny, tmp_path) -> None:
    # Evaluation every 3 rounds: Lightning's ModelCheckpoint would otherwise save only after evaluations.
    probe = {"class_path": "tests.checkpoint_faults.LastCheckpointProbe"}
    config = tiny(**{"trainer.max_epochs": 5, "trainer.check_val_every_n_epoch": 3,
                     "trainer.callbacks": _callbacks(probe)})
    assert run_cli("fit", "--config", str(config)) == 0  # the probe raises if a round started without it
    checkpoint = AtomicCheckpointIO().load_checkpoint(_last(tmp_path, 0))
    assert checkpoint["federated"]["rounds_completed"] == 5
    # The evaluation after round 3 is in it: the round's checkpoint is written after its evaluation.
    # (both splits; the final model's evaluation at round 5 comes after the last checkpoint)
    history = checkpoint["callbacks"]["FairnessMetrics"]["server"]["history"]
    assert [(row["stage"], row["round"]) for row in history] == [("val", 3), ("test", 3)]
    assert list(_last(tmp_path, 0).parent.iterdir()) == [_last(tmp_path, 0)]


def test_diverged_run_keeps_the_checkpoint_of_its_last_completed_round(tiny, tmp_path, capsys) -> None:
    poison = {"class_path": "tests.checkpoint_faults.NaNAtRound", "init_args": {"round_idx": 3}}
    config = tiny(**{"trainer.max_epochs": 6, "trainer.callbacks": _callbacks(poison)})
    assert run_cli("fit", "--config", str(config)) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: round 4: client ") and "diverged (train loss nan)" in line  # index 3
    checkpoint = AtomicCheckpointIO().load_checkpoint(_last(tmp_path, 0))
    assert checkpoint["federated"]["rounds_completed"] == 3
    assert all(torch.isfinite(w).all() for w in checkpoint["state_dict"].values())


def _wait_for(path: Path, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"no {path} after {timeout} s"
        time.sleep(0.005)


def test_kill_9_at_a_random_moment_then_resume_gives_the_uninterrupted_weights(tiny, tmp_path) -> None:
    # Server momentum (FedFa), client momentum kept per client on disk: all of it must survive the kill.
    def config(**slow: object) -> Path:
        return tiny(**{"trainer.max_epochs": 12, "trainer.check_val_every_n_epoch": 5,
                       "trainer.callbacks": _callbacks({"class_path": "tests.checkpoint_faults.SlowRounds",
                                                        "init_args": {"seconds": 0.04, **slow}}),
                       "model.keep_client_optimizer_state": True, "model.client_state": "disk",
                       "model.optimizer": {"class_path": "torch.optim.SGD",
                                           "init_args": {"lr": 0.05, "momentum": 0.9}}})

    gate = tmp_path / "go"
    killed_config = config(gate=str(gate))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "lightning_fl", "fit", "--config", str(killed_config),
                                "--trainer.logger.init_args.version", "1"],
                               cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    killed = _last(tmp_path, 1)
    try:
        # While the process imports and sets up (it waits for the gate before round 0), run the reference.
        assert run_cli("fit", "--config", str(config()), "--trainer.logger.init_args.version", "0") == 0
        gate.touch()
        _wait_for(killed, process, timeout=120)
        delay = random.uniform(0.0, 0.25)  # the 11 rounds after the first checkpoint take >= 0.44 s
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == -signal.SIGKILL, f"the run ended by itself before the kill ({delay=:.3f} s)"
    rounds = AtomicCheckpointIO().load_checkpoint(killed)["federated"]["rounds_completed"]
    assert 1 <= rounds < 12, (rounds, delay)

    assert run_cli("fit", "--config", str(killed_config), "--ckpt_path", str(killed),
                   "--trainer.logger.init_args.version", "2") == 0
    uninterrupted = AtomicCheckpointIO().load_checkpoint(_last(tmp_path, 0))
    resumed = AtomicCheckpointIO().load_checkpoint(_last(tmp_path, 2))
    assert resumed["federated"]["rounds_completed"] == uninterrupted["federated"]["rounds_completed"] == 12
    assert uninterrupted["state_dict"].keys() == resumed["state_dict"].keys()
    for name, value in uninterrupted["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][name]), (name, rounds, delay)
    momentum = (uninterrupted["callbacks"]["FedFa"]["server"], resumed["callbacks"]["FedFa"]["server"])
    assert torch.equal(momentum[0]["momentum"], momentum[1]["momentum"])
