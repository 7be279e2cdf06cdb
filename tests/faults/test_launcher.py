"""The experiment launcher never deletes a run: interrupted runs resume, failed resumes are moved aside.

Training is in-process (``run_cli``) wrapped in fakes that stop it the way a machine would, except the
last test, where the launcher itself is sent SIGTERM while a real training process runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lightning_fl.experiments.launcher import interrupting_signal, launch, run_all
from lightning_fl.experiments.runs import CHECKPOINT, FINISHED, Run, plan_runs
from lightning_fl.faults.checkpoint_io import AtomicCheckpointIO
from tests.conftest import run_cli, tiny_config, write_config

REPO = Path(__file__).resolve().parents[2]


def _train(run: Run) -> int:
    return run_cli(*run.command[2:])  # drop "-m lightning_fl"


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _weights(run: Run) -> dict[str, torch.Tensor]:
    return AtomicCheckpointIO().load_checkpoint(run.log_dir / CHECKPOINT)["state_dict"]


def _assert_same_model(a: Run, b: Run) -> None:
    first, second = _weights(a), _weights(b)
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
    for name in ("fairness_history.csv", "client_accuracy.csv"):  # every evaluation once, the same numbers
        assert (a.log_dir / name).read_text() == (b.log_dir / name).read_text(), name


@pytest.fixture
def config(tmp_path: Path) -> str:
    return str(write_config(tmp_path / "run.yaml", tiny_config(tmp_path)))  # 4 rounds, evaluated every 2


@pytest.fixture
def whole(config: str, tmp_path: Path) -> Run:
    run, = plan_runs({"whole": config}, [3], tmp_path)
    launch(run, train=_train)
    return run


def _killed_after_round_2(code: int):
    """Trains two rounds and returns ``code`` the first time (a kill); trains normally afterwards."""
    calls: list[tuple[str, ...]] = []

    def train(run: Run) -> int:
        calls.append(run.command)
        if len(calls) == 1:
            run_cli(*run.command[2:], "--trainer.max_epochs", "2")
            return code
        return _train(run)

    return train, calls


@pytest.mark.parametrize("code", [-signal.SIGKILL, 128 + signal.SIGTERM])
def test_a_killed_run_is_resumed_from_its_checkpoint_not_retrained(code, config, whole, tmp_path, capsys):
    cut, = plan_runs({"cut": config}, [3], tmp_path)
    train, calls = _killed_after_round_2(code)
    launch(cut, train=train)
    assert len(calls) == 2 and calls[1][-2:] == ("--ckpt_path", str(cut.log_dir / CHECKPOINT))
    marker = json.loads((cut.log_dir / FINISHED).read_text())
    name = signal.Signals(abs(code) % 128).name
    assert marker["resumed"] is True and marker["restarted"] is False
    assert marker["history"] == [f"interrupted by {name} with 2 rounds checkpointed; resuming"]
    assert f"cut/seed_3: interrupted by {name} with 2 rounds checkpointed; resuming" in capsys.readouterr().out
    _assert_same_model(whole, cut)


def test_a_failed_resume_is_moved_aside_with_its_log_reported_and_the_run_restarted(config, whole, tmp_path, capsys):
    cut, = plan_runs({"cut": config}, [3], tmp_path)
    train, _ = _killed_after_round_2(-signal.SIGKILL)
    with pytest.raises(RuntimeError):  # every attempt "killed": gives up after 3 without progress
        launch(cut, train=lambda run: train(run) if "--ckpt_path" not in run.command else -signal.SIGKILL)
    before = _digests(cut.log_dir)
    assert "checkpoints/last.ckpt" in before

    def broken_resume(run: Run) -> int:
        if "--ckpt_path" in run.command:
            with open(run.log_dir / "train.log", "a") as log:
                log.write("error: the checkpoint was trained under another configuration\n")
            return 2
        return _train(run)

    launch(cut, train=broken_resume)
    kept = cut.log_dir.with_name("seed_3.failed-1")
    after = _digests(kept)
    assert after.pop("train.log") and after == before  # the failed attempt, byte for byte, with its log
    assert (kept / "train.log").read_text().endswith("another configuration\n")
    out = capsys.readouterr().out
    assert (f"cut/seed_3: restarted from round 0: resuming round 2 failed (exit 2: error: the checkpoint was trained"
            f" under another configuration); that attempt and its log are kept in {kept}") in out
    assert json.loads((cut.log_dir / FINISHED).read_text())["restarted"] is True
    _assert_same_model(whole, cut)


def test_a_finished_run_without_its_marker_is_recognised_as_finished_not_retrained(whole, capsys):
    checkpoint = (whole.log_dir / CHECKPOINT).read_bytes()
    history = (whole.log_dir / "fairness_history.csv").read_text()
    (whole.log_dir / FINISHED).unlink()
    capsys.readouterr()
    run_all([whole], jobs=1, launcher=lambda run: launch(run, train=_train))
    assert capsys.readouterr().out.split("Runs:\n", 1)[1] == (
        "  whole/seed_3: finished, not retrained: its checkpoint already held every round (4): nothing retrained\n")
    marker = json.loads((whole.log_dir / FINISHED).read_text())
    assert marker["history"] == [f"resumed from round 4 ({whole.log_dir / CHECKPOINT})",
                                 "its checkpoint already held every round (4): nothing retrained"]
    assert (whole.log_dir / CHECKPOINT).read_bytes() == checkpoint
    assert (whole.log_dir / "fairness_history.csv").read_text() == history


def test_a_run_of_another_config_or_a_foreign_folder_is_moved_aside_never_deleted(config, whole, tmp_path):
    before = _digests(whole.log_dir)
    Path(config).write_text(Path(config).read_text().replace("lr: 0.05", "lr: 0.1"))
    changed, = plan_runs({"whole": config}, [3], tmp_path)
    launch(changed, train=lambda run: 0)
    assert _digests(whole.log_dir.with_name("seed_3.outdated-1")) == before
    foreign, = plan_runs({"mine": config}, [0], tmp_path)
    foreign.log_dir.mkdir(parents=True)
    (foreign.log_dir / "notes.txt").write_text("my own notes")
    launch(foreign, train=lambda run: 0)
    assert (foreign.log_dir.with_name("seed_0.outdated-1") / "notes.txt").read_text() == "my own notes"


def test_a_failed_fresh_run_keeps_its_folder_and_reports_the_end_of_its_log(config, tmp_path):
    run, = plan_runs({"bad": config}, [0], tmp_path)

    def fails(run: Run) -> int:
        (run.log_dir / "train.log").write_text("line 1\nerror: clients_per_round must be between 1 and 6; got 40\n")
        return 2

    with pytest.raises(RuntimeError, match=r"(?s)bad seed 0 failed \(exit 2; the run directory is kept: .*"
                                           r"error: clients_per_round must be between 1 and 6; got 40"):
        launch(run, train=fails)
    assert (run.log_dir / "train.log").exists()


def test_the_summary_says_for_each_run_what_happened(config, whole, tmp_path, capsys):
    cut, = plan_runs({"cut": config}, [3], tmp_path)
    train, _ = _killed_after_round_2(-signal.SIGKILL)
    run_all([whole, cut], jobs=1, launcher=lambda run: launch(run, train=train))
    summary = capsys.readouterr().out.split("Runs:\n", 1)[1].splitlines()
    assert summary[0] == "  whole/seed_3: finished before, kept"
    assert summary[1].startswith("  cut/seed_3: trained in ") and summary[1].endswith(
        " s (interrupted by SIGKILL with 2 rounds checkpointed; resuming)")


def test_exit_codes_that_mean_interrupted():
    assert [interrupting_signal(c) for c in (-9, -15, 143, 130, 138, 137, 1, 2, -11, 139)] == \
        ["SIGKILL", "SIGTERM", "SIGTERM", "SIGINT", "SIGUSR1", "SIGKILL", None, None, None, None]


def test_sigterm_to_the_launcher_stops_its_runs_after_their_round_and_the_same_command_resumes_them(tmp_path, capsys):
    config = tiny_config(tmp_path, **{"trainer.max_epochs": 400, "trainer.check_val_every_n_epoch": 100})
    path = write_config(tmp_path / "long.yaml", config)
    script = ("import sys; from lightning_fl.experiments.launcher import run_all; from lightning_fl.experiments.runs"
              f" import plan_runs; from pathlib import Path; run_all(plan_runs({{'long': {str(path)!r}}}, [0],"
              f" Path({str(tmp_path / 'out')!r})), jobs=1)")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    launcher = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    checkpoint = tmp_path / "out" / "long" / "seed_0" / CHECKPOINT
    deadline = time.monotonic() + 120
    while not checkpoint.exists():
        assert launcher.poll() is None and time.monotonic() < deadline, launcher.communicate()
        time.sleep(0.05)
    launcher.send_signal(signal.SIGTERM)
    out, err = launcher.communicate(timeout=120)
    assert launcher.returncode == 143, (out, err)
    assert err.strip().splitlines()[-1] == "error: stopped by SIGTERM; run the same command again to resume"
    assert re.search(r"  long/seed_0: interrupted by SIGTERM with \d+ rounds checkpointed \(.*last\.ckpt\); the same"
                     r" command resumes it", out), out
    log = (checkpoint.parent.parent / "train.log").read_text()
    assert "error: stopped by SIGTERM; " in log and "Traceback" not in log  # the training process stopped cleanly
    rounds = AtomicCheckpointIO().load_checkpoint(checkpoint)["federated"]["rounds_completed"]
    assert 1 <= rounds < 400 and not (checkpoint.parent.parent / FINISHED).exists()
    assert f"round {rounds}/400 (" in log  # the runner's processes log a line per round
    # The same command says it resumes (here without training: the launcher is a stand-in).
    from lightning_fl.experiments.launcher import run_all
    from lightning_fl.experiments.runs import plan_runs as plan
    capsys.readouterr()
    run_all(plan({"long": str(path)}, [0], tmp_path / "out"), jobs=1, launcher=lambda run: 0.0)
    assert f"long/seed_0: resuming from round {rounds}, log in " in capsys.readouterr().out


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_a_finished_run_whose_results_were_damaged_is_trained_again_never_read(damage, whole, config, tmp_path,
                                                                                capsys):
    history = whole.log_dir / "fairness_history.csv"
    good = history.read_text()
    if damage == "truncate":
        history.write_text(good[: len(good) // 2])
    elif damage == "flip":
        history.write_text(good.replace("0.", "9.", 1))
    else:
        history.unlink()
    before = _digests(whole.log_dir)
    again, = plan_runs({"whole": config}, [3], tmp_path)
    run_all([again], jobs=1, launcher=lambda run: launch(run, train=_train))
    kept = whole.log_dir.with_name("seed_3.damaged-1")
    assert f"whole/seed_3: training again: fairness_history.csv changed since the run finished (sha256 differs); the" \
           f" damaged run is kept in {kept}" in capsys.readouterr().out
    assert _digests(kept) == before
    assert history.read_text() == good  # retrained: the same numbers as the first time


@pytest.mark.parametrize("damage", ["garbage", "empty", "delete"])
def test_damaged_markers_are_never_trusted_and_never_a_traceback(damage, whole, config, tmp_path, capsys):
    for marker in (whole.log_dir / FINISHED, whole.log_dir / "started.json"):
        if damage == "garbage":
            marker.write_bytes(b"\x00\xff{not json")
        elif damage == "empty":
            marker.write_text("")
        else:
            marker.unlink()
    before = _digests(whole.log_dir)
    again, = plan_runs({"whole": config}, [3], tmp_path)
    run_all([again], jobs=1, launcher=lambda run: launch(run, train=_train))
    out = capsys.readouterr().out
    kept = whole.log_dir.with_name("seed_3.outdated-1")  # no record says it is this run: kept aside, retrained
    assert f"whole/seed_3: starting afresh: the earlier attempt cannot be resumed (another command or config, or" \
           f" not this runner's); it is kept in {kept}" in out
    assert _digests(kept) == before
    assert json.loads((whole.log_dir / FINISHED).read_text())["resumed"] is False
