"""``model.client_state: disk`` files are as safe as the checkpoint, and a run folder is relocatable.

Every record is checksummed; a flipped, truncated, emptied or deleted file fails in one line naming
the file and the client, before round 1 of a resumed run. The checkpoint names the files relative to
the run folder, so a copied or moved run resumes from its own files, bit for bit, and never touches
the original's.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from lightning_fl.faults.validation import ClientStateError
from lightning_fl.state.client_rows import DiskRows
from lightning_fl.state.client_table import ClientTable
from tests.callbacks.helpers import version_dir
from tests.conftest import ROUND_CHECKPOINT, run_cli

ROWS = "Scaffold.client_control"


def _disk_table(directory: Path) -> ClientTable:
    table = ClientTable("Algo.state", shape=(4,))
    table.bind(4, lambda t: DiskRows(directory, t.name, t.shape, t.dtype))
    return table


def _flip(path: Path, start: int, count: int = 16) -> None:
    data = bytearray(path.read_bytes())
    for i in range(start, start + count):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_flipped_record_is_refused_when_loaded_and_when_read(tmp_path: Path) -> None:
    table = _disk_table(tmp_path)
    table.scatter(torch.tensor([2, 9]), torch.arange(8.0).view(2, 4))
    snapshot = table.state_dict()
    # Client 9's row is the second 16-byte record of the file: bytes 16-32.
    _flip(tmp_path / "Algo.state.0.log", 20, 4)
    with pytest.raises(ClientStateError) as err:
        _disk_table(tmp_path).load_state_dict(snapshot)
    assert str(err.value) == (f"{tmp_path / 'Algo.state.0.log'}: client 9's Algo.state (bytes 16-32) does not match"
                              " its checksum: the client state file is corrupt; resume from an intact copy of the run"
                              " folder or start the run afresh")
    # Damaged while the run reads it (after loading): refused at the read, not used.
    _flip(tmp_path / "Algo.state.0.log", 20, 4)
    restored = _disk_table(tmp_path)
    restored.load_state_dict(snapshot)
    assert restored.gather(torch.tensor([9])).tolist() == [[4.0, 5.0, 6.0, 7.0]]
    # Every read goes to the file (no map kept): damage after loading is caught at the next read.
    _flip(tmp_path / "Algo.state.0.log", 0, 1)
    with pytest.raises(ClientStateError, match=r"client 2's Algo.state \(bytes 0-16\) does not match its checksum"):
        restored.gather(torch.tensor([2]))


@pytest.mark.parametrize(("damage", "message"), [
    ("truncate", "truncated client state file (24 bytes); the checkpoint needs 32 bytes of it (client 9's Algo.state)"),
    ("empty", "empty client state file (0 bytes); the checkpoint needs 32 bytes of it (client 9's Algo.state)"),
    ("delete", "client state file missing (it holds client 9's Algo.state); resume from a complete copy of the run"
               " folder and its latest checkpoint"),
])
def test_a_short_or_missing_file_is_refused_when_loaded(tmp_path: Path, damage: str, message: str) -> None:
    table = _disk_table(tmp_path)
    table.scatter(torch.tensor([2, 9]), torch.ones(2, 4))
    snapshot = table.state_dict()
    file = tmp_path / "Algo.state.0.log"
    if damage == "delete":
        file.unlink()
    else:
        file.write_bytes(file.read_bytes()[:24] if damage == "truncate" else b"")
    with pytest.raises(ClientStateError) as err:
        _disk_table(tmp_path).load_state_dict(snapshot)
    assert str(err.value) == f"{file}: {message}"


def test_an_index_of_an_older_version_still_loads(tmp_path: Path) -> None:
    """Written before records had checksums and names were relative: absolute paths, no ``crcs``."""
    table = _disk_table(tmp_path / "old")
    table.scatter(torch.tensor([3]), torch.full((1, 4), 7.0))
    snapshot = table.state_dict()
    old = {**snapshot, "files": [str(tmp_path / "old" / f) for f in snapshot["files"]]}
    del old["crcs"]
    restored = _disk_table(tmp_path / "new")
    with pytest.warns(UserWarning, match="Algo.state: the checkpoint's client state was written before its records"
                                         " were checksummed; reading them unverified"):
        restored.load_state_dict(old)
    assert restored.gather(torch.tensor([3])).tolist() == [[7.0] * 4]
    assert [Path(f).parent for f in restored.state_dict()["files"]] == [Path(".")]  # copied into its own folder
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["Algo.state.0.log"]


# ----------------------------------------------------------------------------------------- CLI runs
def _config(tiny, **extra: Any) -> Path:
    """SCAFFOLD controls and kept SGD momentum, both on disk (rows and whole objects), ``last.ckpt`` every round."""
    return tiny(**{"trainer.callbacks": [{"class_path": "lightning_fl.callbacks.Scaffold"}, ROUND_CHECKPOINT],
                   "model.client_state": "disk", "model.keep_client_optimizer_state": True,
                   "model.optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.05, "momentum": 0.9}},
                   "data.init_args.num_clients": 12, "trainer.check_val_every_n_epoch": 4, **extra})


def _last(run: Path) -> Path:
    return run / "checkpoints" / "last.ckpt"


def _rows_index(run: Path) -> dict[str, Any]:
    return torch.load(_last(run), weights_only=False)["callbacks"]["Scaffold"]["clients"]["client_control"]


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def half(tiny, tmp_path: Path) -> tuple[Path, Path]:
    """(config, run folder) of 2 rounds of the 4-round disk config (version 0)."""
    config = _config(tiny)
    assert run_cli("fit", "--config", str(_config(tiny, **{"trainer.max_epochs": 2}))) == 0
    return config, version_dir(tmp_path, 0)


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "delete"])
def test_a_damaged_client_state_file_stops_the_resume_in_one_line(half, capfd, damage: str) -> None:
    config, run = half
    index = _rows_index(run)
    # Worked out from the checkpoint's index: the client whose record is damaged, and the bytes needed.
    ids, offsets, lengths = index["ids"].tolist(), index["offsets"].tolist(), index["lengths"].tolist()
    [name] = {Path(f).name for f in index["files"]}
    file = run / "client_state" / name
    end, last_client = max((o + n, k) for k, o, n in zip(ids, offsets, lengths))
    if damage == "flip":
        client, offset, length = ids[1], offsets[1], lengths[1]
        _flip(file, offset + length // 2)
        expected = (f"client {client}'s {ROWS} (bytes {offset}-{offset + length}) does not match its checksum: the"
                    " client state file is corrupt")
    elif damage == "delete":
        file.unlink()
        expected = f"client state file missing (it holds client {last_client}'s {ROWS})"
    else:
        kept = file.stat().st_size // 2 if damage == "truncate" else 0
        file.write_bytes(file.read_bytes()[:kept])
        what = "empty client state file (0 bytes)" if kept == 0 else f"truncated client state file ({kept} bytes)"
        expected = f"{what}; the checkpoint needs {end} bytes of it (client {last_client}'s {ROWS})"
    capfd.readouterr()
    assert run_cli("fit", "--config", str(config), "--ckpt_path", str(_last(run))) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: {file}: {expected}"), err
    assert not any("Traceback" in line for line in err), err
    assert torch.load(_last(run), weights_only=False)["federated"]["rounds_completed"] == 2  # nothing trained


def test_a_copied_or_moved_run_resumes_from_its_own_files(half, tiny, tmp_path: Path) -> None:
    config, original = half
    assert run_cli("fit", "--config", str(config), "--trainer.logger.init_args.version", "9") == 0  # 4 rounds
    uninterrupted = torch.load(_last(version_dir(tmp_path, 9)), weights_only=False)["state_dict"]

    # A copy, resumed while the original is gone from its path (kept elsewhere only to hash it afterwards).
    copy = version_dir(tmp_path, 1)
    shutil.copytree(original, copy)
    before = _hashes(original)
    moved = tmp_path / "moved" / "logs" / "run" / "version_0"
    shutil.move(original, moved)
    assert run_cli("fit", "--config", str(config), "--ckpt_path", str(_last(copy))) == 0
    resumed = torch.load(_last(copy), weights_only=False)
    assert resumed["federated"]["rounds_completed"] == 4
    for key, value in uninterrupted.items():
        assert torch.equal(value, resumed["state_dict"][key]), key
    for index in (resumed["callbacks"]["Scaffold"]["clients"]["client_control"],
                  resumed["federated"]["clients"]["optimizer_states"]):
        assert index["files"] and all(not Path(f).is_absolute() and (copy / f).is_file() for f in index["files"])
    assert not original.exists() and _hashes(moved) == before

    # The original, moved to another folder: it resumes there to the same weights.
    assert run_cli("fit", "--config", str(config), "--ckpt_path", str(_last(moved)),
                   "--trainer.logger.init_args.save_dir", str(tmp_path / "moved" / "logs")) == 0
    assert not original.exists()
    resumed = torch.load(_last(moved), weights_only=False)["state_dict"]
    for key, value in uninterrupted.items():
        assert torch.equal(value, resumed[key]), key


def test_a_checkpoint_resumed_into_another_run_folder_copies_its_files_in(half, tmp_path: Path) -> None:
    # Beside the original, which stays in place: read once, never written, and not needed afterwards.
    config, original = half
    before = _hashes(original)
    assert run_cli("fit", "--config", str(config), "--ckpt_path", str(_last(original)),
                   "--trainer.logger.init_args.version", "5") == 0
    assert _hashes(original) == before
    new = version_dir(tmp_path, 5)
    index = _rows_index(new)
    assert all((new / f).is_file() for f in index["files"])
    shutil.rmtree(original)  # the new run needs nothing of the folder it started from
    assert run_cli("validate", "--config", str(config), "--ckpt_path", str(_last(new)),
                   "--trainer.logger.init_args.version", "5") == 0
