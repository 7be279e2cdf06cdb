"""The Trainer flags a Lightning user reaches for work with every shipped config."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[1]


def _fit(config: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lightning_fl", "fit", "--config", str(config), *flags], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_flags_work_on_a_shipped_config(tmp_path) -> None:
    shipped = REPO / "configs" / "fedfa_synthetic.yaml"  # every shipped config lists the same kinds of callbacks
    common = ("--trainer.max_epochs", "2", "--trainer.logger.init_args.save_dir", str(tmp_path))
    quiet = _fit(shipped, *common, "--trainer.enable_progress_bar", "false")
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert "Rounds:" not in quiet.stdout + quiet.stderr
    bar = _fit(shipped, *common)
    assert bar.returncode == 0 and "Rounds: 100%" in bar.stdout
    assert "Training:" not in bar.stdout  # no stale Lightning bar before the round bar
    # The rest only need an exit code: in process (the shell's view is covered above).
    root = ("--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false")
    assert run_cli("fit", "--config", str(shipped), "--trainer.max_epochs", "2", "--trainer.logger", "false", *root) == 0
    assert run_cli("fit", "--config", str(shipped), "--trainer.fast_dev_run", "true", *root) == 0
