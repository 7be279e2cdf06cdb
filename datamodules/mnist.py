"""MNIST and Fashion-MNIST from their IDX files, partitioned among clients (docs/algorithms.md, Data).

Files (``.gz`` as distributed, or decompressed) are looked up in ``<data_dir>/fashion-mnist/`` and
``<data_dir>/mnist/``; Fashion-MNIST also in ``/usr/share/datasets/fashion-mnist/``, where the
Debian package ``dataset-fashion-mnist`` installs it. ``make data`` fetches Fashion-MNIST without root
(``apt-get download`` + ``dpkg -x``); MNIST needs internet (``download=True`` or
``scripts/fetch_data.py --internet mnist``).

Integrity (``verify_checksums``): every file's IDX header, exact payload length and shape are always
checked. Fashion-MNIST's decompressed payloads are also checked against sha256 digests measured on
the Debian package (whose ``.gz`` files differ from the upstream downloads only in the gzip header:
each is exactly the length of the stored file name shorter, so the payload is the same). For
MNIST we have no payload digest; its ``.gz`` files are checked against the published md5 digests.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from typing_extensions import override

from lightning_fl.datamodules.downloads import (
    CorruptDataError,
    DataNotFoundError,
    FileSpec,
    download_first,
    missing_message,
    verify_file,
)
from lightning_fl.datamodules.idx import parse_idx, read_raw
from lightning_fl.datamodules.partitions import Partition
from lightning_fl.datamodules.train_test_pool import TrainTestPoolDataModule

__all__ = [
    "FASHION_MNIST",
    "MNIST",
    "FashionMNISTDataModule",
    "IDXDataset",
    "IDXFile",
    "MNISTDataModule",
    "load_idx_dataset",
]


@dataclass(frozen=True)
class IDXFile:
    """One file of an IDX dataset.

    Attributes:
        name: File name without ``.gz``.
        shape: Expected array shape.
        payload_sha256: sha256 of the decompressed file (``None``: unknown).
        gz_md5: Published md5 of the ``.gz`` download (``None``: unknown).
        gz_size: Size of the ``.gz`` download in bytes.
    """

    name: str
    shape: tuple[int, ...]
    payload_sha256: str | None = None
    gz_md5: str | None = None
    gz_size: int | None = None


@dataclass(frozen=True)
class IDXDataset:
    """Where an IDX dataset lives and what its four files look like.

    Attributes:
        title: Human-readable name (messages).
        subdir: Directory under ``data_dir``.
        files: ``train_images``, ``train_labels``, ``test_images``, ``test_labels`` in that order.
        urls: Base URLs (mirrors) of the ``.gz`` files, tried in order.
        system_dirs: Extra directories searched after ``<data_dir>/<subdir>``.
        fetch: The command that fetches the files.
    """

    title: str
    subdir: str
    files: tuple[IDXFile, IDXFile, IDXFile, IDXFile]
    urls: tuple[str, ...]
    system_dirs: tuple[str, ...] = ()
    fetch: str = "make data"


FASHION_MNIST = IDXDataset(
    title="Fashion-MNIST",
    subdir="fashion-mnist",
    files=(
        IDXFile("train-images-idx3-ubyte", (60000, 28, 28),
                "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
                "8d4fb7e6c68d591d4c3dfef9ec88bf0d", 26421880),
        IDXFile("train-labels-idx1-ubyte", (60000,),
                "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
                "25c81989df183df01b3e8a0aad5dffbe", 29515),
        IDXFile("t10k-images-idx3-ubyte", (10000, 28, 28),
                "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
                "bef4ecab320f06d8554ea6380940ec79", 4422102),
        IDXFile("t10k-labels-idx1-ubyte", (10000,),
                "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
                "bb300cfdad3c16e7a12a480ee83cd310", 5148),
    ),
    urls=("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",),
    system_dirs=("/usr/share/datasets/fashion-mnist",),
    fetch="make data",
)

MNIST = IDXDataset(
    title="MNIST",
    subdir="mnist",
    files=(
        IDXFile("train-images-idx3-ubyte", (60000, 28, 28), None, "f68b3c2dcbeaaa9fbdd348bbdeb94873", 9912422),
        IDXFile("train-labels-idx1-ubyte", (60000,), None, "d53e105ee54ea40749a09fcbcd1e9432", 28881),
        IDXFile("t10k-images-idx3-ubyte", (10000, 28, 28), None, "9fb629c4189551a2d022fa330f9573f3", 1648877),
        IDXFile("t10k-labels-idx1-ubyte", (10000,), None, "ec29112dd5afa0611ce80d1b7f02629c", 4542),
    ),
    urls=("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/"),
    fetch="scripts/fetch_data.py --internet mnist (needs internet)",
)


def _find(dataset: IDXDataset, data_dir: str | Path) -> tuple[Path | None, list[Path]]:
    """The first directory holding all four files (``.gz`` or raw), and every directory searched."""
    searched = [Path(data_dir) / dataset.subdir] + [Path(d) for d in dataset.system_dirs]
    for folder in searched:
        if all(_path_of(folder, f) is not None for f in dataset.files):
            return folder, searched
    return None, searched


def _path_of(folder: Path, file: IDXFile) -> Path | None:
    for candidate in (folder / (file.name + ".gz"), folder / file.name):
        if candidate.is_file():
            return candidate
    return None


def download_idx_dataset(dataset: IDXDataset, data_dir: str | Path) -> Path:
    """Download the four ``.gz`` files into ``<data_dir>/<subdir>`` (md5- and size-checked); idempotent."""
    folder = Path(data_dir) / dataset.subdir
    for file in dataset.files:
        if _path_of(folder, file) is None:
            spec = FileSpec(file.name + ".gz", size=file.gz_size, md5=file.gz_md5)
            download_first([base + file.name + ".gz" for base in dataset.urls], folder / (file.name + ".gz"), spec)
    return folder


def load_idx_dataset(dataset: IDXDataset, data_dir: str | Path = "data", verify_checksums: bool = True,
                     download: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Read ``(train_images, train_labels, test_images, test_labels)`` of an IDX dataset.

    Args:
        dataset: :data:`FASHION_MNIST`, :data:`MNIST` or another :class:`IDXDataset`.
        data_dir: Root data directory.
        verify_checksums: Check shapes and digests of the known release (turn off for other files in
            the same format, e.g. the tests' tiny ones). Header and length checks always run.
        download: Download missing files from ``dataset.urls`` (needs internet).

    Raises:
        DataNotFoundError: Files missing (one line: where it looked, how to fetch).
        CorruptDataError: A file is truncated, damaged, of the wrong shape or fails its checksum.
        DownloadError: ``download=True`` and no mirror could be reached.
    """
    folder, searched = _find(dataset, data_dir)
    if folder is None and download:
        folder = download_idx_dataset(dataset, data_dir)
    if folder is None:
        names = ", ".join(f.name + "[.gz]" for f in dataset.files)
        raise DataNotFoundError(missing_message(f"{dataset.title} ({names})", searched, dataset.fetch))
    arrays = []
    for file in dataset.files:
        path = _path_of(folder, file)
        if verify_checksums and file.payload_sha256 is None and file.gz_md5 and path.suffix == ".gz":
            verify_file(path, FileSpec(path.name, md5=file.gz_md5))
        raw = read_raw(path)
        array = parse_idx(raw, str(path))
        if verify_checksums:
            if tuple(array.shape) != file.shape:
                raise CorruptDataError(f"{path}: shape {tuple(array.shape)}, expected {file.shape}")
            if file.payload_sha256 is not None:
                digest = hashlib.sha256(raw).hexdigest()
                if digest != file.payload_sha256:
                    raise CorruptDataError(f"{path}: sha256 of the decompressed data is {digest}, expected"
                                           f" {file.payload_sha256}; delete it and fetch it again")
        arrays.append(array)
    images_tr, labels_tr, images_te, labels_te = arrays
    for images, labels, kind in ((images_tr, labels_tr, "train"), (images_te, labels_te, "test")):
        if len(images) != len(labels):
            raise CorruptDataError(f"{folder}: {len(images)} {kind} images but {len(labels)} {kind} labels")
    return images_tr, labels_tr, images_te, labels_te


class _IDXImageDataModule(TrainTestPoolDataModule):
    DATASET: IDXDataset = FASHION_MNIST

    def __init__(
        self,
        data_dir: str = "data",
        num_clients: int = 100,
        partition: Partition | None = None,
        test_set: str = "official",
        flatten: bool = False,
        normalize: bool = True,
        subsample: float | list[float] = 1.0,
        download: bool = False,
        verify_checksums: bool = True,
        seed: int = 0,
        test_fraction: float = 0.2,
        val_fraction: float = 0.1,
    ) -> None:
        super().__init__(
            test_set=test_set, normalize=normalize, flatten=flatten, subsample=subsample,
            partition=partition, num_clients=num_clients, num_classes=10, seed=seed, test_fraction=test_fraction,
            val_fraction=val_fraction,
        )
        self.data_dir = data_dir
        self.download = bool(download)
        self.verify_checksums = bool(verify_checksums)

    @override
    def load_train_test(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        x_tr, y_tr, x_te, y_te = load_idx_dataset(self.DATASET, self.data_dir, self.verify_checksums, self.download)
        return _images(x_tr), _labels(y_tr), _images(x_te), _labels(y_te)


def _images(array: np.ndarray) -> Tensor:
    """``(n, H, W)`` IDX images -> ``(n, 1, H, W)`` ``uint8`` tensor (a writable copy)."""
    return torch.from_numpy(np.array(array, dtype=np.uint8)).unsqueeze(1)


def _labels(array: np.ndarray) -> Tensor:
    return torch.from_numpy(array.astype(np.int64))


class FashionMNISTDataModule(_IDXImageDataModule):
    """Fashion-MNIST (Zalando; 60,000 + 10,000 28x28 grey images, 10 classes) split among clients.

    Inputs are ``(1, 28, 28)`` float32 (for :class:`~lightning_fl.models.CNN28` /
    :class:`~lightning_fl.models.LeNet5`) or ``(784,)`` with ``flatten`` (logistic regression).
    With ``normalize`` pixels are standardised with the training set's mean 0.2860 and std 0.3530,
    otherwise scaled to ``[0, 1]``.

    Args:
        data_dir: Root data directory; files are read from ``<data_dir>/fashion-mnist/`` or
            ``/usr/share/datasets/fashion-mnist/`` (``make data`` fills the former).
        num_clients: Number of clients.
        partition: A :class:`~lightning_fl.datamodules.partitions.Partition` (``IID``, ``Dirichlet``,
            ``Shards`` (McMahan's sort-and-partition), ``Quantity``); ``None`` is ``IID()``.
        test_set: ``official`` (clients' test data = the official test set dealt by label; the
            default, as DWFed/IGFL/Tempo evaluate on the test set) or ``pooled`` (70,000 images
            pooled, each client split ``1 - test_fraction`` / ``test_fraction``, as FedFa/LEAF).
        flatten: ``(784,)`` inputs instead of ``(1, 28, 28)``.
        normalize: Standardise (see above) instead of scaling to ``[0, 1]``.
        subsample: Fraction of each file kept (class-stratified, seeded), for small machines; or one
            fraction per class (a long-tailed population).
        download: Download missing files from the upstream URLs (md5-checked; needs internet).
        verify_checksums: Check shapes and sha256 digests of the release (header/length checks always run).
        seed: Seed of the subsample, the partition, the test deal and the train/test split.
        test_fraction: Per-client test fraction with ``test_set: pooled``.
        val_fraction: Fraction of each client's training samples (its share of the official training
            file with ``test_set: official``) moved to its validation split; ``0``: none.

    Raises:
        DataNotFoundError: At setup, when the files are missing (one line naming the places searched
            and ``make data``).
        CorruptDataError: At setup, for a truncated or damaged file.
        ConfigError: For an invalid option.

    Example (YAML)::

        data:
          class_path: lightning_fl.datamodules.FashionMNISTDataModule
          init_args:
            num_clients: 100
            partition: {class_path: lightning_fl.datamodules.partitions.Shards, init_args: {classes_per_client: 2}}
    """

    DATASET = FASHION_MNIST
    MEAN = (0.2860,)
    STD = (0.3530,)


class MNISTDataModule(_IDXImageDataModule):
    """MNIST (60,000 + 10,000 28x28 handwritten digits) split among clients; as :class:`FashionMNISTDataModule`.

    Files are read from ``<data_dir>/mnist/`` (``train-images-idx3-ubyte.gz`` ...). MNIST cannot be
    fetched without internet: ``download=True`` or ``scripts/fetch_data.py --internet mnist`` takes
    it from the PyTorch mirror or yann.lecun.com (md5-checked). Normalisation uses mean 0.1307 and
    std 0.3081.
    """

    DATASET = MNIST
    MEAN = (0.1307,)
    STD = (0.3081,)
