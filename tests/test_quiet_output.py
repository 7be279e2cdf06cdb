"""A run's console output is information, once: no adverts, no repeated internals, no empty model summary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import tiny_config, write_config

REPO = Path(__file__).resolve().parents[1]


def test_a_run_prints_information_once_and_plainly(tmp_path) -> None:
    # One run, checked for what must not be printed and for how what is printed reads.
    settings = tiny_config(tmp_path / "logs", **{"trainer.max_epochs": 1, "trainer.check_val_every_n_epoch": 1,
                                                 "data.init_args.max_samples_per_client": None})  # unequal n_k
    del settings["trainer"]["enable_model_summary"]  # the CLI's default
    settings["model"]["aggregation"] = {"rule": {"class_path": "lightning_fl.aggregation.Median"}}
    config = write_config(tmp_path / "config.yaml", settings)
    proc = subprocess.run([sys.executable, "-m", "lightning_fl", "fit", "--config", str(config)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    output = proc.stdout + proc.stderr
    for unwanted in ("Tip:", "litlogger", "litmodels", "FLOPs", "is deprecated", "Total estimated model params"):
        assert unwanted not in output, unwanted
    assert "Client model: LogisticRegression, 610 parameters (2.4 kB in fp32); 6 clients, 3 per round" in output
    # Warnings name no source file; the client optimizer is named; the table follows without a blank line.
    assert "warning: Median ignores FedAvg's client weights" in output and ".py:" not in output
    assert "client optimizer torch.optim.SGD(momentum=0.0) at lr 0.05" in output
    lines = proc.stderr.replace("\r", "\n").splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("Fairness of the global model"))
    assert lines[title].startswith("Fairness of the global model after 1 round (") and lines[title - 1].strip()
