"""A damaged --ckpt_path stops in one line; a failed checkpoint write keeps the previous checkpoint."""

from __future__ import annotations

import errno
import functools
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

from lightning_fl.datamodules import SyntheticDataModule
from lightning_fl.faults.checkpoint_io import AtomicCheckpointIO
from lightning_fl.faults.validation import CheckpointError
from lightning_fl.models import LogisticRegression
from lightning_fl.simulation.loop import FederatedLoop
from tests.conftest import run_cli, tiny_config, write_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    """(config, last.ckpt) of a 2-round tiny run, shared by the tests that only read it."""
    root = tmp_path_factory.mktemp("trained")
    config = write_config(root / "config.yaml", tiny_config(root / "logs", **{"trainer.max_epochs": 2}))
    assert run_cli("fit", "--config", str(config)) == 0
    return config, root / "logs" / "run" / "version_0" / "checkpoints" / "last.ckpt"


def flip_tensor_bytes(source: Path, target: Path, count: int = 16) -> None:
    """Copy ``source`` to ``target`` with ``count`` bytes inverted inside its largest tensor record."""
    with zipfile.ZipFile(source) as archive:
        record = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    data = bytearray(source.read_bytes())
    name_length, extra_length = struct.unpack("<HH", data[record.header_offset + 26:record.header_offset + 30])
    start = record.header_offset + 30 + name_length + extra_length + record.file_size // 2  # local header: 30 bytes
    for i in range(start, start + count):
        data[i] ^= 0xFF
    target.write_bytes(bytes(data))


def _damage(kind: str, good: Path, folder: Path) -> Path:
    path = folder / f"{kind}.ckpt"
    if kind == "flipped":
        flip_tensor_bytes(good, path)
    elif kind == "truncated":
        path.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("epoch: 3\n")
    elif kind == "foreign":
        torch.save({"weights": torch.zeros(3)}, path)
    elif kind == "directory":
        path.mkdir()
    return path


@pytest.mark.parametrize(("kind", "message"), [
    ("flipped", "checksum mismatch (the file is corrupt); resume from another copy or start the run afresh"),
    ("truncated", "truncated or damaged checkpoint ("),
    ("empty", "empty file (0 bytes); it was never completely written"),
    ("missing", "no such file"),
    ("text", "not a checkpoint written by torch.save (9 bytes; torch.load: "),
    ("foreign", "not a Lightning checkpoint (the file holds a dict without 'state_dict')"),
    ("directory", "is a directory, not a checkpoint file"),
])
def test_damaged_ckpt_path_fails_in_one_line(trained, tmp_path, capfd, kind, message) -> None:
    config, good = trained
    path = _damage(kind, good, tmp_path)
    assert run_cli("fit", "--config", str(config), "--ckpt_path", str(path)) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --ckpt_path {path}: {message}"), err


def test_flipped_bytes_load_silently_without_the_checksum(trained, tmp_path) -> None:
    _, good = trained
    flip_tensor_bytes(good, tmp_path / "flipped.ckpt")
    weights = torch.load(tmp_path / "flipped.ckpt", weights_only=True)["state_dict"]["model.linear.weight"]
    assert not torch.equal(weights, torch.load(good, weights_only=True)["state_dict"]["model.linear.weight"])
    assert int((weights != torch.load(good, weights_only=True)["state_dict"]["model.linear.weight"]).sum()) == 4


def test_corrupt_checkpoint_from_the_shell_is_one_line_and_no_traceback(trained, tmp_path) -> None:
    config, good = trained
    flip_tensor_bytes(good, tmp_path / "flipped.ckpt")
    proc = subprocess.run([sys.executable, "-m", "lightning_fl", "test", "--config", str(config),
                           "--ckpt_path", str(tmp_path / "flipped.ckpt")], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"error: --ckpt_path {tmp_path / 'flipped.ckpt'}: checksum mismatch (the file is"
                                   " corrupt); resume from another copy or start the run afresh")


def test_python_api_runs_verify_and_write_atomically_too(trained, tmp_path) -> None:
    _, good = trained
    flip_tensor_bytes(good, tmp_path / "flipped.ckpt")

    def trainer() -> pl.Trainer:
        return pl.Trainer(max_epochs=3, accelerator="cpu", logger=False, enable_progress_bar=False,
                          enable_model_summary=False, default_root_dir=tmp_path, num_sanity_val_steps=0)

    def fit(ckpt_path: Path | None) -> pl.Trainer:
        run = trainer()
        sgd = functools.partial(torch.optim.SGD, lr=0.05)  # the tiny config's settings: resume checks them
        loop = FederatedLoop(LogisticRegression(in_features=60, num_classes=10), sgd, clients_per_round=3,
                             local_epochs=2)
        data = SyntheticDataModule(variant="1_1", num_clients=6, max_samples_per_client=80)
        run.fit(loop, data, ckpt_path=ckpt_path)
        return run

    with pytest.raises(CheckpointError, match=r"flipped.ckpt: checksum mismatch"):
        fit(tmp_path / "flipped.ckpt")
    resumed = fit(good)
    assert isinstance(resumed.strategy.checkpoint_io, AtomicCheckpointIO)
    saved = AtomicCheckpointIO().load_checkpoint(tmp_path / "checkpoints" / "epoch=2-step=3.ckpt")
    assert saved["federated"]["rounds_completed"] == 3


def test_failed_write_stops_the_run_in_one_line_and_keeps_the_previous_round(tiny, tmp_path, capfd,
                                                                             monkeypatch) -> None:
    calls = []

    def serialize(self, checkpoint, file) -> None:  # type: ignore[no-untyped-def]
        calls.append(checkpoint["federated"]["rounds_completed"])
        if len(calls) == 3:  # the disk fills up while round 3 is being saved
            file.write(b"PK\x03\x04 a third of it")
            raise OSError(errno.ENOSPC, "No space left on device")
        torch.save(checkpoint, file)

    monkeypatch.setattr(AtomicCheckpointIO, "_serialize", serialize)
    assert run_cli("fit", "--config", str(tiny())) == 1
    last = tmp_path / "logs" / "run" / "version_0" / "checkpoints" / "last.ckpt"
    err = capfd.readouterr().err.strip().splitlines()
    assert err[-1] == (f"error: {last}: could not write the checkpoint (No space left on device); the previous"
                       " checkpoint there is unchanged")
    assert calls == [1, 2, 3]
    assert AtomicCheckpointIO().load_checkpoint(last)["federated"]["rounds_completed"] == 2
    assert sorted(p.name for p in last.parent.iterdir()) == ["last.ckpt"]
