"""CIFAR-10 from the python pickle archive (datamodules/cifar10.py), on tiny archives built here."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning_fl.datamodules import CIFAR10DataModule
from lightning_fl.datamodules.cifar10 import (
    CIFAR10_FOLDER,
    load_cifar10,
    write_cifar_archive,
)
from lightning_fl.datamodules.downloads import CorruptDataError, DataNotFoundError

REPO = Path(__file__).resolve().parents[2]
NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def tiny_batches(per_batch: int = 20, seed: int = 0) -> dict[str, dict]:
    rng = np.random.default_rng(seed)
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        labels = [int(v) for v in rng.integers(0, 10, per_batch)]
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        data[:, 0] = labels  # first red pixel = label: lets the test check image/label alignment
        batches[name] = {"batch_label": name, "labels": labels, "data": data, "filenames": [f"{i}.png" for i in labels]}
    batches["batches.meta"] = {"label_names": NAMES, "num_cases_per_batch": per_batch, "num_vis": 3072}
    return batches


@pytest.fixture
def archive(tmp_path):
    path = tmp_path / "cifar-10-python.tar.gz"
    write_cifar_archive(path, tiny_batches())
    return path


def test_reads_tiny_archive(archive):
    x_tr, y_tr, x_te, y_te, names = load_cifar10(archive.parent, verify_checksums=False)
    assert x_tr.shape == (100, 3, 32, 32) and x_te.shape == (20, 3, 32, 32) and x_tr.dtype == np.uint8
    assert names == NAMES
    np.testing.assert_array_equal(x_tr[:, 0, 0, 0], y_tr)  # channel-major layout: pixel 0 is red (0, 0)
    np.testing.assert_array_equal(x_te[:, 0, 0, 0], y_te)


def test_datamodule_on_tiny_archive_and_extracted_folder(archive, tmp_path):
    dm = CIFAR10DataModule(data_dir=str(archive.parent), num_clients=4, verify_checksums=False, normalize=False)
    dm.setup()
    assert dm.input_shape == (3, 32, 32) and dm.num_clients == 4 and dm.class_names == NAMES
    assert int((dm.data.train_sizes() + dm.data.val_sizes()).sum()) == 100 and int(dm.data.test_sizes().sum()) == 20
    assert int(dm.data.val_sizes().sum()) == 4 * round(0.1 * 25)  # 25 training images per client (IID)
    assert torch.allclose(dm.data.x_train[:, 0, 0, 0] * 255, dm.data.y_train.float())
    extracted = tmp_path / "other" / "cifar10"
    extracted.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(extracted, filter="data")
    again = CIFAR10DataModule(data_dir=str(tmp_path / "other"), num_clients=4, verify_checksums=False, normalize=False)
    again.setup()
    assert torch.equal(dm.data.x_train, again.data.x_train)
    flat = CIFAR10DataModule(data_dir=str(archive.parent), num_clients=2, verify_checksums=False, flatten=True)
    flat.setup()
    assert flat.input_shape == (3072,)


def test_checksum_of_the_official_archive_is_checked(archive):
    with pytest.raises(CorruptDataError, match=r"cifar-10-python.tar.gz: \d+ bytes, expected 170498071 \(truncated\)"):
        load_cifar10(archive.parent)


def test_truncated_archive_is_detected(archive):
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    with pytest.raises(CorruptDataError, match=re.escape(str(archive)) + ": damaged or truncated archive") as info:
        load_cifar10(archive.parent, verify_checksums=False)
    assert "\n" not in str(info.value)


def test_damaged_pickle_and_missing_member(tmp_path):
    batches = tiny_batches()
    path = tmp_path / "cifar-10-python.tar.gz"
    write_cifar_archive(path, {k: v for k, v in batches.items() if k != "test_batch"})
    with pytest.raises(CorruptDataError, match="archive lacks test_batch"):
        load_cifar10(tmp_path, verify_checksums=False)
    folder = tmp_path / "x" / CIFAR10_FOLDER
    folder.mkdir(parents=True)
    with tarfile.open(path) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    import pickle

    (folder / "test_batch").write_bytes(pickle.dumps({b"labels": [1], b"data": np.zeros((1, 3072), np.uint8)})[:-5])
    with pytest.raises(CorruptDataError, match=re.escape(str(folder / "test_batch")) + ": cannot be unpickled"):
        load_cifar10(tmp_path / "x", verify_checksums=False)
    (folder / "test_batch").write_bytes(pickle.dumps({b"labels": [1, 2], b"data": np.zeros((2, 100), np.uint8)}))
    with pytest.raises(CorruptDataError, match=r"data of shape \(2, 100\)"):
        load_cifar10(tmp_path / "x", verify_checksums=False)
    with pytest.raises(CorruptDataError, match="data_batch_1: md5"):
        load_cifar10(tmp_path / "x")  # extracted batches are md5-checked too


def test_missing_archive_message(tmp_path):
    with pytest.raises(DataNotFoundError) as info:
        CIFAR10DataModule(data_dir=str(tmp_path)).setup()
    message = str(info.value)
    assert "\n" not in message
    assert str(tmp_path / "cifar-10-python.tar.gz") in message and str(tmp_path / "cifar10" / CIFAR10_FOLDER) in message
    assert "fetch it with: scripts/fetch_data.py --internet cifar10" in message


@pytest.mark.skipif(
    not any((p / "cifar-10-python.tar.gz").is_file() for p in (REPO / "data", REPO / "data" / "cifar10")),
    reason="CIFAR-10 not in data/ or data/cifar10 (needs internet: scripts/fetch_data.py --internet cifar10)")
def test_real_cifar10():
    x_tr, y_tr, x_te, y_te, names = load_cifar10(REPO / "data")
    assert x_tr.shape == (50000, 3, 32, 32) and x_te.shape == (10000, 3, 32, 32) and names == NAMES
    assert np.bincount(y_tr).tolist() == [5000] * 10
