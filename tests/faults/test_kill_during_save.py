"""SIGKILL in the middle of a checkpoint save: the previous checkpoint is intact and resumes exactly.

Memory client state here (tests/test_checkpoint_every_round.py kills at a random moment with disk
client state); the kill lands while the round's temporary checkpoint file is open.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import torch

from lightning_fl.faults.checkpoint_io import AtomicCheckpointIO
from tests.conftest import ROUND_CHECKPOINT, run_cli

REPO = Path(__file__).resolve().parents[2]


def test_sigkill_during_a_save_keeps_the_previous_checkpoint_and_the_resume_is_exact(tiny, tmp_path):
    def config(*faults: dict) -> Path:
        return tiny(**{"trainer.max_epochs": 5, "trainer.callbacks": [
            {"class_path": "lightning_fl.callbacks.Scaffold"}, *faults, ROUND_CHECKPOINT]})

    assert run_cli("fit", "--config", str(config()), "--trainer.logger.init_args.version", "0") == 0
    killed = config({"class_path": "tests.checkpoint_faults.SignalAtRound",
                     "init_args": {"signum": int(signal.SIGKILL), "round_idx": 2, "during_save": True}})
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "lightning_fl", "fit", "--config", str(killed),
                             "--trainer.logger.init_args.version", "1", "--trainer.enable_progress_bar", "false"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    last = tmp_path / "logs" / "run" / "version_1" / "checkpoints" / "last.ckpt"
    leftovers = [p.name for p in last.parent.iterdir() if p != last]
    assert len(leftovers) == 1 and leftovers[0].startswith(".last.ckpt.")  # the save that was cut short
    assert AtomicCheckpointIO().load_checkpoint(last)["federated"]["rounds_completed"] == 2  # round 3's never landed

    assert run_cli("fit", "--config", str(config()), "--ckpt_path", str(last)) == 0
    assert [p.name for p in last.parent.iterdir()] == ["last.ckpt"]  # the leftover goes at the next save
    whole = AtomicCheckpointIO().load_checkpoint(tmp_path / "logs" / "run" / "version_0" / "checkpoints" / "last.ckpt")
    resumed = AtomicCheckpointIO().load_checkpoint(last)
    assert resumed["federated"]["rounds_completed"] == 5
    assert all(torch.equal(whole["state_dict"][k], resumed["state_dict"][k]) for k in whole["state_dict"])
    controls = (whole["callbacks"]["Scaffold"], resumed["callbacks"]["Scaffold"])
    assert torch.equal(controls[0]["server"]["control"], controls[1]["server"]["control"])
