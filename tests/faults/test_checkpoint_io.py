"""AtomicCheckpointIO and state_digest without a Trainer: atomic replace, failed writes, checksums."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest
import torch
from pytorch_lightning.plugins.io import TorchCheckpointIO

from lightning_fl.faults.checkpoint_io import CHECKSUM_KEY, AtomicCheckpointIO, install_checkpoint_io
from lightning_fl.faults.state_digest import state_digest
from lightning_fl.faults.validation import CheckpointError, CheckpointWriteError


def _checkpoint(value: float = 1.0, rounds: int = 3) -> dict:
    return {"epoch": rounds - 1, "state_dict": {"w": torch.full((4, 3), value)},
            "federated": {"rounds_completed": rounds}}


def _temporaries(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.endswith(".tmp")]


def _sha256_of_stream(*parts: str) -> str:
    """The digest the module docstring describes, built by hand: each part length-prefixed (8 bytes LE)."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode()
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


def test_digest_is_the_documented_stream() -> None:
    assert state_digest({"a": 1, "b": [None, 2.5]}) == _sha256_of_stream(
        "map:2", "str:'a'", "int:1", "str:'b'", "list:2", "NoneType:None", "float:2.5")
    tensor = torch.tensor([1.0, -2.0], dtype=torch.float32)
    expected = hashlib.sha256()
    label = b"tensor:torch.float32:(2,)"
    expected.update(len(label).to_bytes(8, "little") + label)
    expected.update(bytes.fromhex("0000803f000000c0"))  # 1.0 and -2.0 as little-endian IEEE-754 floats
    assert state_digest(tensor) == expected.hexdigest()


def test_digest_sees_one_flipped_bit_and_ignores_storage_details() -> None:
    base = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "ids": {3, 1, 2}}
    same = {"w": base["w"].t().contiguous().t(), "ids": {2, 3, 1}}  # column-major copy, sets in another order
    assert not same["w"].is_contiguous() and state_digest(base) == state_digest(same)
    flipped = {"w": base["w"].clone(), "ids": {3, 1, 2}}
    flipped["w"].view(torch.int32)[1, 2] ^= 1  # lowest mantissa bit of 6.0
    assert state_digest(flipped) != state_digest(base)
    assert state_digest({"x": 1}) != state_digest({"x": 1.0}) != state_digest({"x": "1"}) != state_digest({"x": True})


def test_save_writes_a_verified_checkpoint_with_the_usual_file_mode(tmp_path: Path) -> None:
    io, path = AtomicCheckpointIO(), tmp_path / "run" / "checkpoints" / "last.ckpt"
    io.save_checkpoint(_checkpoint(), path)
    raw = torch.load(path, weights_only=True)
    assert raw[CHECKSUM_KEY] == {"sha256": state_digest(_checkpoint())}
    loaded = io.load_checkpoint(path)
    assert CHECKSUM_KEY not in loaded and torch.equal(loaded["state_dict"]["w"], torch.ones(4, 3))
    assert (io.last_saved, io.last_saved_rounds) == (path, 3)
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    assert _temporaries(path.parent) == []


def _fail_midway(error: BaseException):  # type: ignore[no-untyped-def]
    def serialize(self, checkpoint, file) -> None:  # type: ignore[no-untyped-def]
        file.write(b"PK\x03\x04 half a checkpoint")
        raise error
    return serialize


def test_failed_write_keeps_the_previous_file_and_removes_its_temporary(tmp_path: Path, monkeypatch) -> None:
    io, path = AtomicCheckpointIO(), tmp_path / "last.ckpt"
    io.save_checkpoint(_checkpoint(1.0, rounds=2), path)
    before = path.read_bytes()
    full = OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(AtomicCheckpointIO, "_serialize", _fail_midway(full))
    with pytest.raises(CheckpointWriteError) as failure:
        io.save_checkpoint(_checkpoint(2.0, rounds=3), path)
    assert failure.value.errno == errno.ENOSPC
    assert str(failure.value) == (f"{path}: could not write the checkpoint (No space left on device); the previous"
                                  " checkpoint there is unchanged")
    assert path.read_bytes() == before and _temporaries(tmp_path) == []
    assert io.last_saved_rounds == 2
    assert io.load_checkpoint(path)["federated"]["rounds_completed"] == 2


class _FullDisk:
    """A file that accepts ``room`` bytes, then fails like a full disk."""

    def __init__(self, file, room: int) -> None:  # type: ignore[no-untyped-def]
        self.file, self.room = file, room

    def write(self, data) -> int:  # type: ignore[no-untyped-def]
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()


def test_disk_filling_up_inside_torch_save_keeps_the_previous_file(tmp_path: Path, monkeypatch) -> None:
    # torch.save reports the failed write as a RuntimeError ("unexpected pos") raised while handling the OSError.
    io, path = AtomicCheckpointIO(), tmp_path / "last.ckpt"
    io.save_checkpoint(_checkpoint(1.0, rounds=2), path)
    before = path.read_bytes()
    monkeypatch.setattr(AtomicCheckpointIO, "_serialize", lambda self, checkpoint, file: torch.save(
        checkpoint, _FullDisk(file, room=len(before) // 2)))
    with pytest.raises(CheckpointWriteError, match=r"\(No space left on device\); the previous checkpoint there"):
        io.save_checkpoint(_checkpoint(2.0, rounds=3), path)
    assert path.read_bytes() == before and _temporaries(tmp_path) == []


def test_interrupted_write_keeps_the_previous_file(tmp_path: Path, monkeypatch) -> None:
    io, path = AtomicCheckpointIO(), tmp_path / "last.ckpt"
    io.save_checkpoint(_checkpoint(1.0), path)
    before = path.read_bytes()
    monkeypatch.setattr(AtomicCheckpointIO, "_serialize", _fail_midway(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint(_checkpoint(2.0), path)
    assert path.read_bytes() == before and _temporaries(tmp_path) == []


def test_first_write_failing_leaves_no_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(AtomicCheckpointIO, "_serialize", _fail_midway(OSError(errno.EIO, "Input/output error")))
    with pytest.raises(CheckpointWriteError, match=r"\(Input/output error\); no checkpoint was written$"):
        AtomicCheckpointIO().save_checkpoint(_checkpoint(), tmp_path / "last.ckpt")
    assert list(tmp_path.iterdir()) == []


def test_temporary_left_by_a_killed_writer_goes_at_the_next_save(tmp_path: Path) -> None:
    stale = tmp_path / ".last.ckpt.k1ll3d.tmp"
    stale.write_bytes(b"PK\x03\x04 torn")
    other = tmp_path / ".best.ckpt.abc.tmp"  # another file's temporary is not ours to remove
    other.write_bytes(b"")
    AtomicCheckpointIO().save_checkpoint(_checkpoint(), tmp_path / "last.ckpt")
    assert not stale.exists() and other.exists()


def test_checkpoint_without_checksum_loads_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "old.ckpt"
    torch.save(_checkpoint(5.0), path)
    with pytest.warns(UserWarning, match="has no checksum .* loading it unverified"):
        loaded = AtomicCheckpointIO().load_checkpoint(path)
    assert torch.equal(loaded["state_dict"]["w"], torch.full((4, 3), 5.0))


def test_changed_content_fails_the_checksum(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint(_checkpoint(1.0), path)
    tampered = torch.load(path, weights_only=True)
    tampered["state_dict"]["w"][0, 0] = 1.0 + 2**-23  # one ulp: the next float after 1.0
    torch.save(tampered, path)
    with pytest.raises(CheckpointError, match=r"last.ckpt: checksum mismatch \(the file is corrupt\)"):
        AtomicCheckpointIO().load_checkpoint(path)


def test_installed_only_over_lightnings_default() -> None:
    class Strategy:
        checkpoint_io = TorchCheckpointIO()

    default, custom = Strategy(), Strategy()
    install_checkpoint_io(default)
    assert type(default.checkpoint_io) is AtomicCheckpointIO

    class Mine(TorchCheckpointIO):
        pass

    custom.checkpoint_io = Mine()
    install_checkpoint_io(custom)
    assert type(custom.checkpoint_io) is Mine
