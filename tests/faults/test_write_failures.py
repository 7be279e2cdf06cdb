"""Every write failure stops the run with one ``error:`` line naming the file and the cause; the last
good checkpoint stays intact (issue 19): client state files at a file-size limit or on a full disk, a
read-only ``checkpoints/`` folder, a read-only run folder, figures and CSVs.

Read-only folders are tested with ``chmod`` where that stops the test's user (not root) and, for
everyone, with :func:`tests.write_faults.deny_writes`, which fails the same calls in-process.
"""

from __future__ import annotations

import doctest
import errno
import hashlib
import os
import re
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch

import lightning_fl.faults.write_failures
from lightning_fl.faults.checkpoint_io import AtomicCheckpointIO
from tests.callbacks.helpers import version_dir
from tests.conftest import ROUND_CHECKPOINT, run_cli
from tests.write_faults import deny_writes

REPO = Path(__file__).resolve().parents[2]
KEPT = "the checkpoints written before are unchanged"
SCAFFOLD = {"trainer.callbacks": [{"class_path": "lightning_fl.callbacks.Scaffold"},
                                  {"class_path": "lightning_fl.callbacks.FairnessMetrics"}, ROUND_CHECKPOINT],
            "model.client_state": "disk"}


def _error_line(capfd: Any) -> str:
    """The one ``error:`` line of the run's stderr (it must be the last line, and no traceback)."""
    err = capfd.readouterr().err.strip().splitlines()
    assert [line for line in err if line.startswith("error:")] == err[-1:], err
    assert not any("Traceback" in line for line in err), err
    return err[-1]


def _rounds(ckpt: Path) -> int:
    return AtomicCheckpointIO().load_checkpoint(ckpt)["federated"]["rounds_completed"]


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_messages_are_documented() -> None:
    result = doctest.testmod(lightning_fl.faults.write_failures, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 5 and result.failed == 0


# ----------------------------------------------------------------------------------------- client state
def test_client_state_at_a_file_size_limit(tiny, tmp_path: Path) -> None:
    root = tmp_path / "run"
    run = root / "lightning_logs" / "version_0"  # the folder of a run without a logger
    config = tiny(**SCAFFOLD, **{"trainer.logger": False, "trainer.default_root_dir": str(root),
                                 "data.init_args.num_clients": 12, "model.clients_per_round": 6})
    # One round appends 6 rows of 610 fp32 values (14,640 bytes); last.ckpt is about as large. With
    # ulimit -f at 20,000 bytes, round 1 and its checkpoint fit and round 2's third row does not.
    # SIGXFSZ ignored, as shells and schedulers that set such limits do: the write fails with EFBIG.
    script = ("import resource, signal, sys\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
              "import lightning_fl.apps.cli, matplotlib.pyplot\n"  # caches written before the limit
              "resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))\n"
              "lightning_fl.apps.cli.main(sys.argv[1:])\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-c", script, "fit", "--config", str(config)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    err = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr and [line for line in err if line.startswith("error:")] == err[-1:], err
    log = run / "client_state" / "Scaffold.client_control.0.log"
    assert err[-1].startswith(f"error: {log}: could not write client "), err[-1]
    assert err[-1].endswith(f"'s Scaffold.client_control (File too large); {KEPT}"), err[-1]
    assert log.stat().st_size == 20000
    assert _rounds(run / "checkpoints" / "last.ckpt") == 1


def test_client_state_on_a_full_disk_keeps_a_checkpoint_that_resumes_exactly(tiny, tmp_path: Path, capfd,
                                                                             monkeypatch) -> None:
    config = tiny(**SCAFFOLD, **{"trainer.max_epochs": 2})
    assert run_cli("fit", "--config", str(config)) == 0  # the uninterrupted reference, version 0
    run = version_dir(tmp_path, 1)
    with monkeypatch.context() as patch:
        # Round 1 writes its 3 clients' rows; the disk is full when round 2 writes its first.
        refused = deny_writes(patch, run / "client_state", errno.ENOSPC, at="write", after=3)
        capfd.readouterr()
        assert run_cli("fit", "--config", str(config)) == 1
    line = _error_line(capfd)
    [log] = set(refused)
    assert line.startswith(f"error: {log}: could not write client ")
    assert line.endswith(f"'s Scaffold.client_control (No space left on device); {KEPT}")
    last = run / "checkpoints" / "last.ckpt"
    assert _rounds(last) == 1
    assert run_cli("fit", "--config", str(config), "--ckpt_path", str(last)) == 0
    reference, resumed = (torch.load(version_dir(tmp_path, v) / "checkpoints" / "last.ckpt", weights_only=False)
                          for v in (0, 1))
    for name, value in reference["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][name]), name


# ----------------------------------------------------------------------------------------- read-only folders
@pytest.fixture
def two_rounds(tiny, tmp_path: Path) -> tuple[Path, Path]:
    """(4-round config, run folder holding 2 rounds and their last.ckpt)."""
    assert run_cli("fit", "--config", str(tiny(**SCAFFOLD, **{"trainer.max_epochs": 2}))) == 0
    return tiny(**SCAFFOLD), version_dir(tmp_path, 0)


def _read_only(how: str, folder: Path, monkeypatch: Any) -> None:
    if how == "simulated":
        deny_writes(monkeypatch, folder, errno.EACCES)
        return
    for path in [folder, *folder.rglob("*")]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:  # root (with CAP_DAC_OVERRIDE, as usual on CI) writes anyway: then only the simulation applies
        tempfile.TemporaryFile(dir=folder).close()
    except PermissionError:
        return
    _writable_again(folder)
    pytest.skip(f"chmod does not stop this user (uid {os.geteuid()}); the 'simulated' case covers the same code path")


def _writable_again(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


@pytest.mark.parametrize("how", ["chmod", "simulated"])
def test_a_read_only_checkpoints_folder(two_rounds, capfd, monkeypatch, how: str) -> None:
    config, run = two_rounds
    last = run / "checkpoints" / "last.ckpt"
    try:
        with monkeypatch.context() as patch:
            _read_only(how, last.parent, patch)
            capfd.readouterr()
            assert run_cli("fit", "--config", str(config), "--ckpt_path", str(last)) == 1
    finally:
        _writable_again(last.parent)
    assert _error_line(capfd) == (f"error: {last}: could not write the checkpoint (Permission denied); the previous"
                                  " checkpoint there is unchanged")
    assert _rounds(last) == 2
    assert sorted(p.name for p in last.parent.iterdir()) == ["last.ckpt"]


@pytest.mark.parametrize("how", ["chmod", "simulated"])
def test_a_read_only_run_folder(two_rounds, capfd, monkeypatch, how: str) -> None:
    config, run = two_rounds
    before = _hashes(run)
    last = run / "checkpoints" / "last.ckpt"
    try:
        with monkeypatch.context() as patch:
            _read_only(how, run, patch)
            capfd.readouterr()
            assert run_cli("fit", "--config", str(config), "--ckpt_path", str(last)) == 1
    finally:
        _writable_again(run)
    line = _error_line(capfd)
    # The first file the resumed run makes there: TensorBoard's event file.
    pattern = rf"error: {re.escape(str(run))}/events\.out\.tfevents\.[^/:]+: Permission denied; {KEPT}"
    assert re.fullmatch(pattern, line), line
    assert _hashes(run) == before
    assert _rounds(last) == 2


# ----------------------------------------------------------------------------------------- figures and CSVs
def test_a_figure_that_cannot_be_written(two_rounds, capfd, monkeypatch) -> None:
    config, run = two_rounds
    last = run / "checkpoints" / "last.ckpt"
    with monkeypatch.context() as patch:
        refused = deny_writes(patch, run / "figures", errno.EACCES)
        capfd.readouterr()
        assert run_cli("fit", "--config", str(config), "--ckpt_path", str(last)) == 1
    figure = run / "figures" / "val" / "client_acc_figure" / "round_0004.png"  # the first: round 4's evaluation
    assert str(figure) in refused
    assert _error_line(capfd) == (f"error: {figure}: could not write figure val/client_acc_figure (Permission denied);"
                                  f" {KEPT}")
    assert _rounds(last) == 3


@pytest.mark.parametrize(("name", "what", "rounds"), [
    ("client_accuracy.csv", "the client accuracies", 1),  # written at the evaluation of round 2
    ("fairness_history.csv", "the fairness history", 2),  # written when training ends
    ("fairness_summary.csv", "the fairness summary", 2),
])
def test_a_csv_on_a_full_disk(tiny, tmp_path: Path, capfd, monkeypatch, name: str, what: str, rounds: int) -> None:
    config = tiny(**SCAFFOLD, **{"trainer.max_epochs": 2})
    run = version_dir(tmp_path, 0)
    with monkeypatch.context() as patch:
        deny_writes(patch, run / name, errno.ENOSPC, at="write")
        capfd.readouterr()
        assert run_cli("fit", "--config", str(config)) == 1
    assert _error_line(capfd) == f"error: {run / name}: could not write {what} (No space left on device); {KEPT}"
    assert _rounds(run / "checkpoints" / "last.ckpt") == rounds


def _csv_logger(tmp_path: Path) -> dict[str, Any]:
    return {"class_path": "pytorch_lightning.loggers.CSVLogger", "init_args": {"save_dir": str(tmp_path / "logs"),
                                                                               "name": "run"}}


def test_histogram_csvs_on_a_full_disk(tiny, tmp_path: Path, capfd, monkeypatch) -> None:
    # Without TensorBoard, histograms go to histograms/<tag>.csv.
    assert run_cli("fit", "--config", str(tiny(**SCAFFOLD, **{"trainer.max_epochs": 2,
                                                              "trainer.logger": _csv_logger(tmp_path)}))) == 0
    run = version_dir(tmp_path, 0)
    last = run / "checkpoints" / "last.ckpt"
    with monkeypatch.context() as patch:
        refused = deny_writes(patch, run / "histograms", errno.ENOSPC, at="write")
        capfd.readouterr()
        assert run_cli("fit", "--config", str(tiny(**SCAFFOLD, **{"trainer.logger": _csv_logger(tmp_path)})),
                       "--ckpt_path", str(last)) == 1
    first = Path(refused[0])
    tag = first.relative_to(run / "histograms").with_suffix("").as_posix()
    assert _error_line(capfd) == f"error: {first}: could not write histogram {tag} (No space left on device); {KEPT}"
    assert _rounds(last) == 3  # the resumed run's first histogram is round 4's evaluation


def test_a_loggers_own_file_on_a_full_disk_names_the_run_folder(tiny, tmp_path: Path, capfd, monkeypatch) -> None:
    # Lightning's CSVLogger writes metrics.csv itself; a write() on a full disk names no file.
    config = tiny(**SCAFFOLD, **{"trainer.max_epochs": 2, "trainer.logger": _csv_logger(tmp_path)})
    run = version_dir(tmp_path, 0)
    with monkeypatch.context() as patch:
        deny_writes(patch, run / "metrics.csv", errno.ENOSPC, at="write")
        capfd.readouterr()
        assert run_cli("fit", "--config", str(config)) == 1
    assert _error_line(capfd) == f"error: a file under {run}: could not write (No space left on device); {KEPT}"
    assert _rounds(run / "checkpoints" / "last.ckpt") == 2  # CSVLogger writes metrics.csv when training ends


def test_the_rounds_to_target_result_on_a_full_disk(tiny, tmp_path: Path, capfd, monkeypatch) -> None:
    callbacks = [*SCAFFOLD["trainer.callbacks"],
                 {"class_path": "lightning_fl.callbacks.RoundsToTarget", "init_args": {"target": 0.99}}]
    config = tiny(**{**SCAFFOLD, "trainer.callbacks": callbacks, "trainer.max_epochs": 2})
    result = version_dir(tmp_path, 0) / "rounds_to_target.json"
    with monkeypatch.context() as patch:
        deny_writes(patch, result, errno.ENOSPC, at="write")
        capfd.readouterr()
        assert run_cli("fit", "--config", str(config)) == 1
    assert _error_line(capfd) == (f"error: {result}: could not write the rounds-to-target result (No space left on"
                                  f" device); {KEPT}")
    assert _rounds(result.parent / "checkpoints" / "last.ckpt") == 2  # written when training ends
