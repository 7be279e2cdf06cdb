"""Per-client state stores: rows on first write, snapshots that later rounds cannot change, disk = memory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lightning_fl.faults.validation import ClientStateError
from lightning_fl.state.client_rows import DiskRows, MemoryRows
from lightning_fl.state.client_table import ClientTable
from tests.callbacks.helpers import CHECKPOINT, load_last, version_dir
from tests.conftest import run_cli


def _disk_table(tmp_path: Path, width: int = 3) -> ClientTable:
    table = ClientTable("Algo.state", shape="model", default=0.0)
    table.bind(width, lambda t: DiskRows(tmp_path / "rows", t.name, t.shape, t.dtype))
    return table


def test_rows_are_allocated_on_first_write_with_defaults_for_the_rest(tmp_path: Path) -> None:
    for table in (ClientTable("m", shape=(2,), default=-1.0), _disk_table(tmp_path, 2)):
        table.bind(2) if isinstance(table.rows, MemoryRows) else None
        assert len(table) == 0
        table.scatter(torch.tensor([7]), torch.tensor([[1.0, 2.0]]))
        assert len(table) == 1
        rows = table.gather(torch.tensor([3, 7]))
        assert rows[1].tolist() == [1.0, 2.0]
        assert rows[0].tolist() == [table.default] * 2
        assert table.seen(torch.tensor([3, 7])) == [False, True]


def test_a_disk_snapshot_is_not_changed_by_later_writes(tmp_path: Path) -> None:
    table = _disk_table(tmp_path)
    ids = torch.tensor([0, 5])
    table.scatter(ids, torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]))
    snapshot = table.state_dict()
    for round_idx in range(40):  # many later rounds: forces compaction of the append-only file
        table.scatter(ids, torch.full((2, 3), 100.0 + round_idx))
    assert table.gather(ids)[:, 0].tolist() == [139.0, 139.0]
    files = sorted(p.name for p in (tmp_path / "rows").iterdir())
    assert len(files) <= 3, files  # compaction removed the old generations
    restored = _disk_table(tmp_path)
    restored.load_state_dict(snapshot)
    assert restored.gather(ids).tolist() == [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]
    # The snapshot is small: an index, not the rows.
    assert set(snapshot) == {"store", "files", "ids", "file_index", "offsets", "lengths", "crcs"}


def test_a_snapshot_whose_file_is_gone_names_it(tmp_path: Path) -> None:
    table = _disk_table(tmp_path)
    table.scatter(torch.tensor([1]), torch.ones(1, 3))
    snapshot = table.state_dict()
    for file in (tmp_path / "rows").iterdir():
        file.unlink()
    with pytest.raises(ClientStateError, match=r"rows/Algo.state.0.log: client state file missing \(it holds client 1's"
                                               r" Algo.state\)"):
        _disk_table(tmp_path).load_state_dict(snapshot)


def _scaffold_run(tiny, store: str, **extra) -> Path:
    callbacks = [{"class_path": "lightning_fl.callbacks.Scaffold"}, CHECKPOINT]
    return tiny(**{"trainer.callbacks": callbacks, "model.client_state": store, "data.init_args.num_clients": 12,
                   **extra})


def test_disk_and_memory_stores_train_the_same_model(tiny, tmp_path: Path) -> None:
    assert run_cli("fit", "--config", str(_scaffold_run(tiny, "memory"))) == 0
    assert run_cli("fit", "--config", str(_scaffold_run(tiny, "disk"))) == 0
    memory, disk = load_last(tmp_path, 0), load_last(tmp_path, 1)
    for name, value in memory["state_dict"].items():
        assert torch.equal(value, disk["state_dict"][name]), name
    rows = disk["callbacks"]["Scaffold"]["clients"]["client_control"]
    # Named relative to the run folder, so that a moved or copied run folder finds its own files.
    assert rows["store"] == "disk" and rows["files"] and all(Path(f).parent == Path("client_state")
                                                             and (version_dir(tmp_path, 1) / f).is_file()
                                                             for f in rows["files"])
    # Only the clients sampled in 4 rounds of 3 have a row (12 clients in the federation).
    assert 3 <= len(rows["ids"]) < 12


def test_a_disk_checkpoint_resumes_in_memory_to_the_same_model(tiny, tmp_path: Path) -> None:
    assert run_cli("fit", "--config", str(_scaffold_run(tiny, "memory"))) == 0
    assert run_cli("fit", "--config", str(_scaffold_run(tiny, "disk", **{"trainer.max_epochs": 2}))) == 0
    half = version_dir(tmp_path, 1) / "checkpoints" / "last.ckpt"
    assert run_cli("fit", "--config", str(_scaffold_run(tiny, "memory")), "--ckpt_path", str(half)) == 0
    full, resumed = load_last(tmp_path, 0), load_last(tmp_path, 1)  # resumed in its run directory
    for name, value in full["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][name]), name


def test_kept_optimizer_states_on_disk_train_the_same_model_as_in_memory(tiny, tmp_path: Path) -> None:
    kept = {"model.keep_client_optimizer_state": True, "data.init_args.num_clients": 12,
            "model.optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.05, "momentum": 0.9}}}
    assert run_cli("fit", "--config", str(tiny(**kept))) == 0
    assert run_cli("fit", "--config", str(tiny(**kept, **{"model.client_state": "disk"}))) == 0
    memory, disk = load_last(tmp_path, 0), load_last(tmp_path, 1)
    for name, value in memory["state_dict"].items():
        assert torch.equal(value, disk["state_dict"][name]), name
    saved = disk["federated"]["clients"]["optimizer_states"]
    assert saved["store"] == "disk" and 3 <= len(saved["ids"]) < 12  # only clients that trained
    assert len(memory["federated"]["clients"]["optimizer_states"]["objects"]) == len(saved["ids"])
