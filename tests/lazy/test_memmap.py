"""MemmapDataModule: a written federation read back lazily and eagerly is bitwise the original; a round reads its cohort's rows only."""

from __future__ import annotations

import doctest
import importlib
import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch

from lightning_fl.callbacks import FedAvg
from lightning_fl.datamodules import MemmapDataModule, SyntheticDataModule
from lightning_fl.datamodules.memmap import MemmapClientData
from lightning_fl.datamodules.memmap_files import write_federation
from lightning_fl.models import LogisticRegression
from lightning_fl.personalization import EvalProtocol
from lightning_fl.simulation.loop import FederatedLoop
from lightning_fl.state.data import ClientData, FederatedData, offsets_from_sizes

N, K, M, SEED = 12, 4, 5, 3
NAMES = ("x_train", "y_train", "train_offsets", "x_test", "y_test", "test_offsets", "x_val", "y_val", "val_offsets")


def _synthetic(val_fraction: float = 0.1) -> SyntheticDataModule:
    return SyntheticDataModule("1_1", num_clients=N, seed=SEED, max_samples_per_client=40, val_fraction=val_fraction)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Synthetic federation's train and test splits (before the validation split), written once."""
    return write_federation(_synthetic().build_data(), tmp_path_factory.mktemp("memmap") / "synthetic")


def _memmap(folder: Path, lazy: bool, val_fraction: float = 0.1) -> MemmapDataModule:
    dm = MemmapDataModule(str(folder), seed=SEED, val_fraction=val_fraction, lazy=lazy)
    dm.setup()
    return dm


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    return (a is None and b is None) or (a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b))


def test_the_files_hold_the_federation_as_written(folder: Path) -> None:
    # Read with numpy alone: the arrays are the tensors, clients one after another, offsets N + 1 int64.
    data = _synthetic().build_data()
    for split in ("train", "test"):
        x, y, offsets = data.split(split)
        assert np.array_equal(np.load(folder / f"{split}_x.npy"), x.numpy())
        assert np.array_equal(np.load(folder / f"{split}_y.npy"), y.numpy())
        on_disk = np.load(folder / f"{split}_offsets.npy")
        assert on_disk.dtype == np.int64 and on_disk.tolist() == offsets.tolist() and len(on_disk) == N + 1


@pytest.mark.parametrize("val_fraction", [0.1, 0.0])
def test_staging_every_client_lazily_and_eagerly_is_the_original_federation_bitwise(folder: Path,
                                                                                    val_fraction: float) -> None:
    original = _synthetic(val_fraction)
    original.setup()
    lazy, eager = _memmap(folder, True, val_fraction), _memmap(folder, False, val_fraction)
    assert isinstance(lazy.data, MemmapClientData) and isinstance(lazy.data, ClientData) and lazy.is_lazy
    assert isinstance(eager.data, FederatedData) and not eager.is_lazy
    for name in NAMES:  # the eager read is the original federation itself
        assert _same(getattr(eager.data, name), getattr(original.data, name)), name
    source = lazy.data
    assert (source.num_clients, source.num_classes, source.input_shape) == (N, 10, (60,))
    order = torch.tensor([7, 0, 11, 3, 5, 1, 9, 2, 10, 4, 8, 6])  # row i is client order[i]
    for split in ("train", "val", "test") if val_fraction else ("train", "test"):
        assert torch.equal(source.sizes(split), original.data.sizes(split))
        staged, ref = source.stage(order, split), original.data.stage(order, split)
        for name in NAMES:
            assert _same(getattr(staged, name), getattr(ref, name)), (split, name)


def test_other_dtypes_come_back_as_written(tmp_path: Path) -> None:
    # uint8 inputs (character codes) and float64 inputs keep their dtype; labels stay int64.
    for dtype in (torch.uint8, torch.float64):
        x = torch.arange(14, dtype=torch.float64).mul(1.5).reshape(7, 2).to(dtype)
        y = torch.tensor([0, 2, 1, 1, 0, 2, 1])
        data = FederatedData(x[:5], y[:5], offsets_from_sizes([2, 3]), x[5:], y[5:], offsets_from_sizes([0, 2]), 3)
        folder = write_federation(data, tmp_path / str(dtype))
        for lazy in (True, False):
            staged = _memmap(folder, lazy, val_fraction=0.0).data.stage([1, 0], "test")
            assert staged.x_train.dtype == dtype and staged.y_train.dtype == torch.int64
            assert torch.equal(staged.x_train, torch.cat([x[2:5], x[0:2]]))  # client 1's rows, then client 0's
            assert torch.equal(staged.x_test, x[5:7]) and staged.test_offsets.tolist() == [0, 2, 2]


def _fit(dm, engine: str, rounds: int = 2) -> FederatedLoop:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    loop = FederatedLoop(client=LogisticRegression(60, 10), optimizer=lambda p: torch.optim.SGD(p, lr=0.05),
                         clients_per_round=K, local_epochs=1, batch_size=10, seed=0, engine=engine,
                         eval=EvalProtocol(client_subset=M))
    with tempfile.TemporaryDirectory(prefix="lfl-") as root:
        trainer = pl.Trainer(default_root_dir=root, max_epochs=rounds, accelerator="cpu", logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                             num_sanity_val_steps=0, check_val_every_n_epoch=1, callbacks=[FedAvg()])
        trainer.fit(loop, datamodule=dm)
    return loop


@pytest.mark.parametrize("engine", ["sequential", "vectorized"])
def test_a_fedavg_run_gives_bitwise_the_weights_of_the_original_federation(folder: Path, engine: str) -> None:
    original = _fit(_synthetic(), engine)
    lazy = _fit(MemmapDataModule(str(folder), seed=SEED, lazy=True), engine)
    eager = _fit(MemmapDataModule(str(folder), seed=SEED, lazy=False), engine)
    assert lazy.source is not None and eager.source is None and original.source is None
    assert lazy.engine.name == eager.engine.name == engine
    weights = [loop.layout.flatten(loop.model.state_dict()) for loop in (original, lazy, eager)]
    assert torch.equal(weights[0], weights[1]) and torch.equal(weights[0], weights[2])
    assert torch.equal(lazy.last_evaluation.correct, original.last_evaluation.correct)
    assert int((lazy.last_evaluation.total > 0).sum()) == M


class RecordingArray:
    """A mapped array whose row slices are recorded as ``(lo, hi)``; anything else it is asked is refused."""

    def __init__(self, array: np.ndarray, log: list[tuple[int, int]]) -> None:
        self.array, self.log, self.dtype, self.shape = array, log, array.dtype, array.shape

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, key: slice) -> np.ndarray:
        assert isinstance(key, slice) and key.step is None, f"not a row slice: {key!r}"
        self.log.append((key.start, key.stop))
        return self.array[key]


def _record(source: MemmapClientData) -> dict[str, list[tuple[int, int]]]:
    reads: dict[str, list[tuple[int, int]]] = {"train": [], "test": []}
    for split, log in reads.items():
        source.files.x[split] = RecordingArray(source.files.x[split], log)
    return reads


def _rows(folder: Path, split: str, clients: list[int]) -> list[tuple[int, int]]:
    """The clients' row ranges, from the offsets file read with numpy alone."""
    offsets = np.load(folder / f"{split}_offsets.npy")
    return [(int(offsets[k]), int(offsets[k + 1])) for k in clients]


def test_staging_a_cohort_reads_its_rows_and_nothing_else(folder: Path) -> None:
    source = _memmap(folder, True).data
    reads = _record(source)
    source.stage([9, 2, 5], "train")
    assert reads == {"train": _rows(folder, "train", [9, 2, 5]), "test": []}
    reads["train"].clear()
    source.stage([4, 0], "test")
    assert reads == {"train": _rows(folder, "train", [4, 0]), "test": _rows(folder, "test", [4, 0])}


def test_a_round_reads_the_rows_of_the_clients_it_stages_only(folder: Path) -> None:
    dm = _memmap(folder, True)
    source, calls = dm.data, []
    reads = _record(source)
    stage = source.stage

    def recorded(ids, split="train", device=None):  # type: ignore[no-untyped-def]
        before = {s: len(r) for s, r in reads.items()}
        staged = stage(ids, split, device)
        calls.append((torch.as_tensor(ids).tolist(), split, {s: r[before[s]:] for s, r in reads.items()}))
        return staged

    source.stage = recorded
    _fit(dm, "vectorized", rounds=1)
    assert sum(len(r) for *_, got in calls for r in got.values()) == sum(len(r) for r in reads.values())
    # Set-up's probe of client 0, the round's cohort, then the evaluation subsets (after the round, at the end).
    assert [(len(ids), split) for ids, split, _ in calls][:2] == [(1, "val"), (K, "train")]
    assert {len(ids) for ids, *_ in calls[2:]} == {M}
    for ids, split, got in calls:
        assert got["train"] == _rows(folder, "train", ids)
        assert got["test"] == (_rows(folder, "test", ids) if split == "test" else [])
    cohort_rows = sum(hi - lo for lo, hi in calls[1][2]["train"])
    assert cohort_rows < len(source.files.x["train"]) // 2  # K of N clients: far from every row


@pytest.mark.parametrize("name", ["memmap", "memmap_files", "memmap_format"])
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"lightning_fl.datamodules.{name}")
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_the_bench_memmap_row_is_the_run_of_the_generated_row(tmp_path: Path) -> None:
    # bench/million.py's memory-mapped row reads the federation its lazy rows generate: the same run.
    million = importlib.import_module("bench.million")
    folder = million.write_memmap(300, tmp_path / "federation")
    records = []
    for memmap in (None, folder):
        million._worker(300, True, "FedAvg", "memory", rounds=2, cohort=10, subset=10, out=tmp_path / "row.json",
                        memmap=memmap)
        records.append(json.loads((tmp_path / "row.json").read_text()))
    assert records[0]["test_acc_mean"] == records[1]["test_acc_mean"] and 0 < records[1]["test_acc_mean"] < 1
