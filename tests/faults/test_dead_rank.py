"""A rank that dies is reported by the project's own line, with the intact checkpoint (2 gloo processes)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from lightning_fl.faults.dead_rank import lost_rank
from tests.conftest import ROUND_CHECKPOINT, tiny_config, write_config

REPO = Path(__file__).resolve().parents[2]


def test_lightnings_process_watcher_names_the_dead_rank_before_it_stops_the_others(tmp_path):
    # Rank 1 dies at the start of round 2 while rank 0 is still busy in it (client state on disk, a long
    # local round): Lightning's watcher notices first (it polls every 5 s) and used to SIGKILL rank 0 silently.
    config = tiny_config(tmp_path / "logs", **{"data.init_args.num_clients": 8, "model.clients_per_round": 5,
                                                "model.client_state": "disk", "model.collective_timeout": 60.0})
    config["trainer"]["callbacks"] = [
        {"class_path": "lightning_fl.callbacks.Scaffold"}, ROUND_CHECKPOINT,
        {"class_path": "tests.distributed.faults.DieAtRound", "init_args": {"rank": 1, "round_idx": 1}},
        {"class_path": "tests.distributed.faults.SleepAtRound", "init_args": {"rank": 0, "round_idx": 1, "seconds": 12}}]
    path = write_config(tmp_path / "dies.yaml", config)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "lightning_fl", "fit", "--config", str(path), "--trainer.strategy",
                             "ddp", "--trainer.devices", "2", "--trainer.enable_progress_bar", "false"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    last = tmp_path / "logs" / "run" / "version_0" / "checkpoints" / "last.ckpt"
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert re.search(rf"^error: rank 1 \(PID \d+\) exited with code 1 during round 2; the other ranks are stopped;"
                     rf" {re.escape(str(last))} \(1 rounds\) is intact: resume with --ckpt_path {re.escape(str(last))}$",
                     result.stderr, re.MULTILINE), result.stderr[-3000:]


def test_a_lost_peer_in_any_collective_is_one_line():
    err = RuntimeError("[../gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:36517: Connection reset by peer."
                       " This is typically caused by a remote worker hanging")
    wrapped = RuntimeError("broadcast failed")
    wrapped.__cause__ = err
    assert lost_rank(wrapped) == ("another rank's process died or hangs (Connection reset by peer); every rank stops;"
                                  " no checkpoint was written")
    assert lost_rank(RuntimeError("CUDA error: an illegal memory access")) is None
