"""IDX reader, MNIST / Fashion-MNIST datamodules, official test-set dealing (datamodules/idx.py, mnist.py)."""

from __future__ import annotations

import gzip
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning_fl.datamodules import FashionMNISTDataModule, MNISTDataModule
from lightning_fl.datamodules.downloads import CorruptDataError, DataNotFoundError
from lightning_fl.datamodules.idx import parse_idx, read_idx, write_idx
from lightning_fl.datamodules.mnist import FASHION_MNIST, MNIST, load_idx_dataset
from lightning_fl.datamodules.partitions import Shards
from lightning_fl.datamodules.train_test_pool import deal_by_label, stratified_subsample

from lightning_fl.faults.validation import ConfigError
from tests.conftest import skip_without_data

REPO = Path(__file__).resolve().parents[2]
NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def write_tiny_mnist(folder: Path, n_train: int = 200, n_test: int = 50, gz: bool = True, seed: int = 0) -> None:
    """Four IDX files in MNIST's layout: images encode their label in the mean brightness."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if gz else ""
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = (np.arange(n) % 10).astype(np.uint8)
        images = (rng.integers(0, 50, (n, 28, 28)) + labels[:, None, None] * 20).astype(np.uint8)
        write_idx(folder / f"{prefix}-images-idx3-ubyte{suffix}", images)
        write_idx(folder / f"{prefix}-labels-idx1-ubyte{suffix}", labels)


# ----------------------------------------------------------------------------- reader
def test_idx_header_and_dims_by_hand(tmp_path):
    payload = struct.pack(">HBBIII", 0, 0x08, 3, 2, 3, 4) + bytes(range(24))
    (tmp_path / "a-idx3-ubyte").write_bytes(payload)
    array = read_idx(tmp_path / "a-idx3-ubyte")
    assert array.shape == (2, 3, 4) and array.dtype == np.uint8 and array[1, 2, 3] == 23
    labels = struct.pack(">HBBI", 0, 0x08, 1, 3) + bytes([7, 8, 9])
    assert parse_idx(labels).tolist() == [7, 8, 9]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
def test_idx_roundtrip_all_types(tmp_path, dtype):
    array = (np.arange(60).reshape(3, 4, 5) - 7).astype(dtype)
    if dtype == np.uint8:
        array = np.arange(60, dtype=np.uint8).reshape(3, 4, 5)
    for name in ("x-idx3", "x-idx3.gz"):
        write_idx(tmp_path / name, array)
        back = read_idx(tmp_path / name, expected_shape=(3, 4, 5))
        np.testing.assert_array_equal(back, array)
        assert back.dtype == np.dtype(dtype)


def test_idx_magic_number_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad-idx1-ubyte"
    bad.write_bytes(b"\x00\x01\x08\x01\x00\x00\x00\x01\x05")  # second byte must be 0
    with pytest.raises(CorruptDataError, match=re.escape(f"{bad}: not an IDX file")):
        read_idx(bad)
    bad.write_bytes(b"\x00\x00\x07\x01\x00\x00\x00\x01\x05")  # unknown type byte
    with pytest.raises(CorruptDataError, match="not an IDX file"):
        read_idx(bad)
    bad.write_bytes(b"\x00\x00")
    with pytest.raises(CorruptDataError, match="too short"):
        read_idx(bad)


def test_truncated_and_padded_files_are_errors_naming_the_file(tmp_path):
    path = tmp_path / "train-images-idx3-ubyte"
    write_idx(path, np.zeros((10, 28, 28), dtype=np.uint8))
    raw = path.read_bytes()
    path.write_bytes(raw[:-100])
    expected = f"{path}: truncated: 7756 bytes, expected 7856 for shape (10, 28, 28) of uint8"
    with pytest.raises(CorruptDataError, match=re.escape(expected)):
        read_idx(path)
    path.write_bytes(raw + b"\x00")
    with pytest.raises(CorruptDataError, match="has trailing bytes"):
        read_idx(path)
    path.write_bytes(raw[:10])
    with pytest.raises(CorruptDataError, match="truncated IDX header"):
        read_idx(path)
    gz = tmp_path / "train-images-idx3-ubyte.gz"
    gz.write_bytes(gzip.compress(raw)[:-20])
    with pytest.raises(CorruptDataError, match=re.escape(f"{gz}: damaged gzip file")):
        read_idx(gz)
    with pytest.raises(CorruptDataError, match=r"shape \(10, 28, 28\), expected \(60000, 28, 28\)"):
        path.write_bytes(raw)
        read_idx(path, expected_shape=(60000, 28, 28))


# ----------------------------------------------------------------------------- datamodules on tiny files
@pytest.mark.parametrize("gz", [True, False])
def test_mnist_datamodule_reads_tiny_idx_files(tmp_path, gz):
    write_tiny_mnist(tmp_path / "mnist", gz=gz)
    dm = MNISTDataModule(data_dir=str(tmp_path), num_clients=5, partition=Shards(classes_per_client=2),
                         verify_checksums=False)
    dm.setup()
    assert dm.input_shape == (1, 28, 28) and dm.num_classes == 10 and dm.num_clients == 5
    assert dm.data.x_train.dtype == torch.float32
    # official test set: all 200 train images partitioned, all 50 test images dealt to clients by label
    assert int((dm.data.train_sizes() + dm.data.val_sizes()).sum()) == 200 and int(dm.data.test_sizes().sum()) == 50
    train_classes = dm.label_histograms() > 0
    test_hist = dm.data.label_histograms("test")
    assert bool((test_hist[~train_classes] == 0).all())  # no client is tested on a class it never trains on
    assert (dm.label_histograms() > 0).sum(1).tolist() == [2] * 5
    assert dm.partition_summary()["mean_emd"] > 1.0
    assert dm.partition_figure() is not None


def test_flatten_normalize_subsample_and_pooled(tmp_path):
    write_tiny_mnist(tmp_path / "fashion-mnist")
    common = {"data_dir": str(tmp_path), "num_clients": 4, "verify_checksums": False}
    dm = FashionMNISTDataModule(**common, flatten=True, normalize=False, test_set="pooled", test_fraction=0.2)
    dm.setup()
    assert dm.input_shape == (784,)
    assert float(dm.data.x_train.min()) >= 0.0 and float(dm.data.x_train.max()) <= 1.0
    assert int((dm.data.train_sizes() + dm.data.val_sizes()).sum()) == 200 and int(dm.data.test_sizes().sum()) == 50  # 250 pooled, 80/20
    sub = FashionMNISTDataModule(**common, subsample=0.4)
    sub.setup()
    assert int((sub.data.train_sizes() + sub.data.val_sizes()).sum()) == 80 and int(sub.data.test_sizes().sum()) == 20
    again = FashionMNISTDataModule(**common, subsample=0.4)
    again.setup()
    assert torch.equal(sub.data.x_train, again.data.x_train) and torch.equal(sub.data.y_test, again.data.y_test)
    with pytest.raises(ConfigError, match="subsample"):
        FashionMNISTDataModule(subsample=0.0)
    with pytest.raises(ConfigError, match="test_set must be one of official, pooled"):
        FashionMNISTDataModule(test_set="central")


def test_checksums_reject_files_of_another_release(tmp_path):
    write_tiny_mnist(tmp_path / "mnist")
    with pytest.raises(CorruptDataError, match="train-images-idx3-ubyte.gz: md5"):
        load_idx_dataset(MNIST, tmp_path)
    write_tiny_mnist(tmp_path / "fashion-mnist")
    with pytest.raises(CorruptDataError, match=r"shape \(200, 28, 28\), expected \(60000, 28, 28\)"):
        load_idx_dataset(FASHION_MNIST, tmp_path)


def test_missing_files_message_is_one_line_with_places_and_command(tmp_path):
    with pytest.raises(DataNotFoundError) as info:
        FashionMNISTDataModule(data_dir=str(tmp_path)).setup()
    message = str(info.value)
    assert "\n" not in message
    assert str(tmp_path / "fashion-mnist") in message and "/usr/share/datasets/fashion-mnist" in message
    assert message.endswith("fetch it with: make data")
    with pytest.raises(DataNotFoundError,
                       match=r"MNIST .* not found; looked in: .*mnist; fetch it with: .*--internet mnist"):
        MNISTDataModule(data_dir=str(tmp_path)).setup()


def test_download_from_file_url_mirror(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    write_tiny_mnist(mirror)
    import dataclasses

    import lightning_fl.datamodules.mnist as mnist

    files = tuple(dataclasses.replace(f, gz_md5=None, gz_size=None) for f in MNIST.files)
    tiny = dataclasses.replace(MNIST, files=files, urls=((tmp_path / "dead").as_uri() + "/", mirror.as_uri() + "/"))
    monkeypatch.setattr(mnist.MNISTDataModule, "DATASET", tiny)
    dm = MNISTDataModule(data_dir=str(tmp_path / "data"), num_clients=2, download=True, verify_checksums=False)
    dm.setup()
    assert sorted(p.name for p in (tmp_path / "data" / "mnist").iterdir()) == sorted(n + ".gz" for n in NAMES)


# ----------------------------------------------------------------------------- dealing
def test_deal_by_label_follows_train_distribution_and_uses_everything():
    hist = torch.tensor([[30, 0, 0], [0, 10, 10], [10, 10, 0]])
    labels = torch.tensor([0] * 40 + [1] * 20 + [2] * 10)
    parts = deal_by_label(hist, labels, torch.Generator().manual_seed(0))
    assert sorted(torch.cat(parts).tolist()) == list(range(70))
    got = torch.stack([torch.bincount(labels[p], minlength=3) for p in parts])
    assert got.tolist() == [[30, 0, 0], [0, 10, 10], [10, 10, 0]]


def test_stratified_subsample_keeps_every_class():
    labels = torch.tensor([0] * 90 + [1] * 9 + [2])
    keep = stratified_subsample(labels, 0.1, torch.Generator().manual_seed(0))
    assert torch.bincount(labels[keep]).tolist() == [9, 1, 1]


def test_a_fraction_per_class_gives_a_long_tail_and_one_number_is_unchanged():
    labels = torch.arange(400) % 4  # 100 of each class
    keep = stratified_subsample(labels, [0.5, 0.5, 0.1, 0.02], torch.Generator().manual_seed(0))
    assert torch.bincount(labels[keep]).tolist() == [50, 50, 10, 2]
    assert len(set(keep.tolist())) == len(keep) and keep.tolist() == sorted(keep.tolist())
    same = stratified_subsample(labels, [0.3] * 4, torch.Generator().manual_seed(5))
    assert torch.equal(same, stratified_subsample(labels, 0.3, torch.Generator().manual_seed(5)))
    with pytest.raises(ConfigError, match="subsample must list a fraction for each of the 4 classes; got 3"):
        stratified_subsample(labels, [0.5, 0.5, 0.5], torch.Generator().manual_seed(0))
    with pytest.raises(ConfigError, match=r"subsample must be a number in \(0, 1\] or a list of one per class"):
        FashionMNISTDataModule(subsample=[0.5, 0.0])


# ----------------------------------------------------------------------------- real files (make data)
FASHION_DIR = REPO / "data" / "fashion-mnist"


def test_real_fashion_mnist():
    skip_without_data(all((FASHION_DIR / (n + ".gz")).is_file() for n in NAMES),
                      "Fashion-MNIST not in data/fashion-mnist; run `make data` (CI does)")
    x_tr, y_tr, x_te, y_te = load_idx_dataset(FASHION_MNIST, REPO / "data")  # shapes + sha256 of all four files
    assert x_tr.shape == (60000, 28, 28) and x_te.shape == (10000, 28, 28)
    assert np.bincount(y_tr).tolist() == [6000] * 10 and np.bincount(y_te).tolist() == [1000] * 10
    dm = FashionMNISTDataModule(data_dir=str(REPO / "data"), num_clients=100, partition=Shards(classes_per_client=1))
    dm.setup()
    # 100 one-class clients of 600 images each; the default val_fraction 0.1 holds 60 of each
    # client's 600 out for validation, and the 10,000 test images stay untouched.
    summary = dm.partition_summary()
    assert (summary["train_samples"], summary["val_samples"], summary["test_samples"]) == (54000, 6000, 10000)
    assert dm.data.val_sizes().tolist() == [60] * 100
    assert (dm.label_histograms() > 0).sum(1).tolist() == [1] * 100
    assert abs(float(dm.data.x_train.mean())) < 0.01 and abs(float(dm.data.x_train.std()) - 1) < 0.01
