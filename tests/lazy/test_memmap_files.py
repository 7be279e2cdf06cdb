"""The federation folder: the atomic writer, the converter CLI, the shipped config, one line for every bad folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from lightning_fl.datamodules import MemmapDataModule, SyntheticDataModule
from lightning_fl.datamodules import memmap_files
from lightning_fl.datamodules.memmap_files import write_federation
from lightning_fl.faults.state_digest import state_digest
from lightning_fl.faults.validation import ConfigError
from lightning_fl.state.data import FederatedData, offsets_from_sizes
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[2]


def _small() -> FederatedData:
    """3 clients of 2, 1, 3 training rows (0..5) and 1, 1, 0 test rows (10, 11); 3 classes."""
    x = torch.arange(8, dtype=torch.float32).unsqueeze(1).repeat(1, 2) + torch.tensor([0.0] * 6 + [4.0, 4.0]).unsqueeze(1)
    y = torch.tensor([0, 1, 2, 0, 1, 2, 1, 0])
    return FederatedData(x[:6], y[:6], offsets_from_sizes([2, 1, 3]), x[6:], y[6:], offsets_from_sizes([1, 1, 0]), 3)


def _open(folder: Path, lazy: bool = True) -> MemmapDataModule:
    dm = MemmapDataModule(str(folder), seed=0, val_fraction=0.0, lazy=lazy)
    dm.setup()
    return dm


def _one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message and message
    return message


def test_the_writer_refuses_a_non_empty_folder_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("a user's file")
    with pytest.raises(ConfigError) as err:
        write_federation(_small(), mine)
    assert str(mine) in _one_line(err) and "not an empty folder" in str(err.value)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"] and (mine / "notes.txt").read_text() == "a user's file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # no staging folder left beside it
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ConfigError):
        write_federation(_small(), tmp_path / "a_file")
    assert (tmp_path / "a_file").read_text() == "x"
    empty = tmp_path / "empty"
    empty.mkdir()
    write_federation(_small(), empty)  # an empty folder is taken
    assert (empty / "federation.json").is_file()


def test_a_failed_write_leaves_no_folder_and_no_partial_files(tmp_path: Path) -> None:
    data, calls = _small(), []
    stage = data.stage

    def failing(ids, split="train", device=None):  # type: ignore[no-untyped-def]
        calls.append(torch.as_tensor(ids).tolist())
        if len(calls) == 3:  # the probe, the first chunk (clients 0, 1), then a failure on client 2
            raise OSError("disk full")
        return stage(ids, split, device)

    data.stage = failing
    with pytest.raises(OSError, match="disk full"):
        write_federation(data, tmp_path / "fed", chunk_clients=2)
    assert calls == [[0], [0, 1], [2]] and list(tmp_path.iterdir()) == []


def test_a_lazy_source_is_written_a_chunk_of_clients_at_a_time(tmp_path: Path) -> None:
    # 9 per_client Synthetic clients, staged 4 at a time: the folder is the eager federation of the same source.
    lazy = SyntheticDataModule("1_1", num_clients=9, seed=2, max_samples_per_client=30, generator="per_client",
                               lazy=True)
    folder = memmap_files.write_federation(memmap_files.unsplit_federation(lazy), tmp_path / "fed", chunk_clients=4)
    assert lazy.val_fraction == 0.1  # unsplit_federation gives the datamodule back as it was
    eager = SyntheticDataModule("1_1", num_clients=9, seed=2, max_samples_per_client=30, generator="per_client")
    eager.setup()
    read = MemmapDataModule(str(folder), seed=2, val_fraction=0.1)
    read.setup()
    for split in ("train", "val", "test"):
        staged, ref = read.data.stage(torch.arange(9), split), eager.data.stage(torch.arange(9), split)
        for name in ("x_train", "y_train", "train_offsets", "x_val", "x_test", "y_test", "test_offsets"):
            a, b = getattr(staged, name), getattr(ref, name)
            assert (a is None and b is None) or torch.equal(a, b), (split, name)


def test_the_writer_refuses_a_federation_with_a_validation_split(tmp_path: Path) -> None:
    dm = SyntheticDataModule("1_1", num_clients=4, seed=0, max_samples_per_client=30)
    dm.setup()
    with pytest.raises(ConfigError) as err:
        write_federation(dm.data, tmp_path / "fed")
    assert "validation split" in _one_line(err) and "build_data()" in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_the_header_describes_the_federation(tmp_path: Path) -> None:
    header = json.loads((write_federation(_small(), tmp_path / "fed") / "federation.json").read_text())
    assert header == {"format": "lightning_fl.federation", "version": 1, "num_clients": 3, "num_classes": 3,
                      "input_shape": [2], "x_dtype": "float32", "y_dtype": "int64"}


def _broken(tmp_path: Path, name: str, array: np.ndarray | None) -> Path:
    """A written federation with file ``name`` replaced by ``array`` (or deleted)."""
    folder = write_federation(_small(), tmp_path / "fed")
    (folder / name).unlink()
    if array is not None:
        np.save(folder / name, array)
    return folder


BAD = {  # file -> (replacement, what the one line says); the small federation has 6 train rows, 3 clients
    "missing file": ("test_y.npy", None, "has no test_y.npy"),
    "decreasing offsets": ("train_offsets.npy", np.array([0, 3, 2, 6]), "train_offsets.npy must be non-decreasing"),
    "offsets not from 0": ("train_offsets.npy", np.array([1, 2, 3, 6]), "train_offsets.npy must start at 0"),
    "offsets short of the rows": ("train_offsets.npy", np.array([0, 2, 3, 5]), "must end at the 6 rows"),
    "int32 offsets": ("train_offsets.npy", np.array([0, 2, 3, 6], dtype=np.int32), "N + 1 int64 offsets"),
    "x and y rows differ": ("train_y.npy", np.array([0, 1, 2, 0, 1]), "train_x.npy has 6 rows but train_y.npy 5"),
    "label too large": ("train_y.npy", np.array([0, 1, 2, 3, 1, 2]), "label 3 at row 3, outside [0, 3)"),
    "negative label": ("test_y.npy", np.array([1, -1]), "label -1 at row 1, outside [0, 3)"),
    "client counts differ": ("test_offsets.npy", np.array([0, 1, 2]), "test_offsets.npy 2; both must describe"),
    "client without training rows": ("train_offsets.npy", np.array([0, 3, 3, 6]), "client 1 has no training sample"),
    "x of another shape": ("train_x.npy", np.zeros((6, 3), np.float32), "federation.json says float32 of shape (2,)"),
}


@pytest.mark.parametrize("lazy", [True, False])
@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_folder_is_one_line_naming_data_folder_at_setup(tmp_path: Path, case: str, lazy: bool) -> None:
    name, array, says = BAD[case]
    folder = _broken(tmp_path, name, array)
    dm = MemmapDataModule(str(folder), lazy=lazy)  # constructing reads nothing
    with pytest.raises(ConfigError) as err:
        dm.setup()
    assert _one_line(err).startswith("data.folder: ") and says in str(err.value), str(err.value)


def test_a_missing_folder_and_a_non_bool_lazy_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _open(tmp_path / "nowhere")
    assert _one_line(err).startswith(f"data.folder: no federation folder {tmp_path / 'nowhere'}")
    assert "python -m lightning_fl.datamodules.memmap_files" in str(err.value)
    with pytest.raises(ConfigError) as err:
        MemmapDataModule(str(tmp_path), lazy="yes")  # type: ignore[arg-type]
    assert _one_line(err) == "data.lazy must be true or false; got 'yes'"
    (tmp_path / "fed").mkdir()
    (tmp_path / "fed" / "federation.json").write_text('{"format": "something else"}')
    with pytest.raises(ConfigError) as err:
        _open(tmp_path / "fed")
    assert "must say format 'lightning_fl.federation', version 1" in _one_line(err)


def test_the_cli_stops_before_training_with_the_one_line(tmp_path: Path, capsys) -> None:
    folder = _broken(tmp_path, "train_offsets.npy", np.array([0, 3, 2, 6]))
    code = run_cli("fit", "--config", str(REPO / "configs" / "datasets" / "memmap_lazy.yaml"),
                   f"--data.init_args.folder={folder}", "--trainer.logger=false")
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and lines[-1].startswith("error: data.folder: train_offsets.npy must be non-decreasing")
    assert not any("Rounds:" in line for line in lines)


def test_the_digest_hashes_offsets_header_and_sizes_not_contents(tmp_path: Path) -> None:
    folder = write_federation(_small(), tmp_path / "fed")
    first = _open(folder).data.digest()
    assert _open(folder).data.digest() == first
    assert MemmapDataModule(str(folder), seed=1, val_fraction=0.0).build_source().digest() != first
    other = _small()
    other.train_offsets = offsets_from_sizes([1, 2, 3])  # the same rows, other client boundaries
    assert _open(write_federation(other, tmp_path / "other")).data.digest() != first
    np.save(folder / "train_x.npy", np.load(folder / "train_x.npy") + 1)  # same dtype and shape: not detected
    assert _open(folder).data.digest() == first


def test_the_converter_writes_a_configs_federation_and_refuses_an_existing_folder(tmp_path: Path, capsys) -> None:
    out = tmp_path / "synthetic"
    memmap_files.main(["--config", str(REPO / "configs" / "fedavg_synthetic.yaml"), "--out", str(out)])
    assert "wrote 30 clients of SyntheticDataModule" in capsys.readouterr().out
    original = SyntheticDataModule("1_1", num_clients=30, seed=0)  # fedavg_synthetic.yaml's data
    original.setup()
    read = _open(out, lazy=False)
    read_split = MemmapDataModule(str(out), seed=0, lazy=False)
    read_split.setup()
    assert read.data.num_clients == 30 and not read.data.has_validation
    for name in ("x_train", "y_train", "train_offsets", "x_val", "y_val", "val_offsets", "x_test", "y_test"):
        assert torch.equal(getattr(read_split.data, name), getattr(original.data, name)), name
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    with pytest.raises(SystemExit) as exit_:
        memmap_files.main(["--config", str(REPO / "configs" / "fedavg_synthetic.yaml"), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and err == (f"error: --out: {out} already exists and is not an empty folder; nothing"
                                             " was written (write a federation to a new folder)")
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_the_shipped_config_trains_the_weights_of_the_config_it_was_written_from(tmp_path: Path) -> None:
    # configs/datasets/memmap_lazy.yaml reads `make memmap-data`'s folder: fedavg_synthetic.yaml's federation.
    out = memmap_files.convert_config(REPO / "configs" / "fedavg_synthetic.yaml", tmp_path / "synthetic")[0]
    common = ["--trainer.max_epochs=2", "--trainer.enable_progress_bar=false", "--model.eval.client_subset=10",
              f"--trainer.logger.init_args.save_dir={tmp_path}", "--trainer.logger.init_args.version=0"]
    assert run_cli("fit", "--config", str(REPO / "configs" / "datasets" / "memmap_lazy.yaml"),
                   f"--data.init_args.folder={out}", "--trainer.logger.init_args.name=memmap", *common) == 0
    assert run_cli("fit", "--config", str(REPO / "configs" / "fedavg_synthetic.yaml"),
                   "--trainer.logger.init_args.name=eager", *common) == 0
    weights = [torch.load(tmp_path / name / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
               for name in ("memmap", "eager")]
    assert state_digest(weights[0]) == state_digest(weights[1])


def test_a_lazy_config_converts_to_the_files_of_its_eager_twin(tmp_path: Path) -> None:
    # any_dataset_lazy.yaml is any_dataset.yaml with data.lazy: true: the one is staged in chunks, the other built whole.
    folders = [memmap_files.convert_config(REPO / "configs" / "datasets" / f"{name}.yaml", tmp_path / name)[0]
               for name in ("any_dataset", "any_dataset_lazy")]
    names = sorted(p.name for p in folders[0].iterdir())
    assert names == sorted(p.name for p in folders[1].iterdir()) and len(names) == 7
    for name in names:
        assert (folders[0] / name).read_bytes() == (folders[1] / name).read_bytes(), name


@pytest.mark.parametrize(("data", "says"), [
    ("model: {}\n", "has no data: {class_path: ..., init_args: {...}} section"),
    ("data: {class_path: nope.Nope}\n", "data section cannot be used: class_path nope.Nope: No module named 'nope'"),
    ("data: {class_path: lightning_fl.datamodules.SyntheticDataModule, init_args: {num_clients: 0}}\n",
     "data section cannot be used: num_clients must be an integer >= 1; got 0"),
], ids=["no data", "class path", "bad argument"])
def test_the_converter_names_a_bad_config_in_one_line(tmp_path: Path, capsys, data: str, says: str) -> None:
    (tmp_path / "c.yaml").write_text(data)
    with pytest.raises(SystemExit) as exit_:
        memmap_files.main(["--config", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and err.startswith(f"error: --config: {tmp_path / 'c.yaml'}") and says in err
    assert "\n" not in err and not (tmp_path / "out").exists()
