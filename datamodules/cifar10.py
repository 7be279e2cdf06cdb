"""CIFAR-10 from the standard python pickle archive, partitioned among clients (docs/algorithms.md, Data).

The loader reads ``cifar-10-python.tar.gz`` (the archive at :data:`CIFAR10_URL`) directly, without
extracting it, from ``<data_dir>/`` or ``<data_dir>/cifar10/``; an already extracted
``cifar-10-batches-py/`` directory in the same places works too. Each batch is a pickle of a dict
with ``data`` (``10000 x 3072`` ``uint8``, channel-major 32x32 images) and ``labels``.

Integrity (``verify_checksums``): the archive's size and published md5, or each extracted batch's
published md5 (the digests torchvision uses), are checked; a truncated archive or pickle is always
an error naming the file.
"""

from __future__ import annotations

import io
import pickle
import tarfile
import zlib
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from typing_extensions import override

from lightning_fl.datamodules.downloads import (
    CorruptDataError,
    DataNotFoundError,
    FileSpec,
    download_file,
    missing_message,
    verify_file,
)
from lightning_fl.datamodules.partitions import Partition
from lightning_fl.datamodules.train_test_pool import TrainTestPoolDataModule

__all__ = [
    "CIFAR10_ARCHIVE",
    "CIFAR10_BATCHES",
    "CIFAR10_URL",
    "CIFAR10DataModule",
    "load_cifar10",
]

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
#: The archive (published md5; size as served by the URL).
CIFAR10_ARCHIVE = FileSpec("cifar-10-python.tar.gz", size=170498071, md5="c58f30108f718f92721af3b95e74349a")
CIFAR10_FOLDER = "cifar-10-batches-py"
#: Member name -> published md5 of the extracted file.
CIFAR10_BATCHES: dict[str, str] = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
    "batches.meta": "5ff9c542aee3614f3951f8cda6e48888",
}
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
FETCH = "scripts/fetch_data.py --internet cifar10 (needs internet), or pass download=True"


def _unpickle(raw: bytes, name: str) -> dict:
    try:
        obj = pickle.loads(raw, encoding="bytes")
    except Exception as err:  # truncated / damaged pickles raise many different types
        raise CorruptDataError(f"{name}: cannot be unpickled ({type(err).__name__}: {err}); the file is damaged"
                               ) from err
    if not isinstance(obj, dict):
        raise CorruptDataError(f"{name}: expected a pickled dict, got {type(obj).__name__}")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in obj.items()}


def _batch_arrays(batch: dict, name: str) -> tuple[np.ndarray, np.ndarray]:
    if "data" not in batch or "labels" not in batch:
        raise CorruptDataError(f"{name}: a CIFAR batch needs 'data' and 'labels'; found {sorted(batch)}")
    data = np.asarray(batch["data"], dtype=np.uint8)
    labels = np.asarray(batch["labels"], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3072 or len(data) != len(labels):
        raise CorruptDataError(f"{name}: data of shape {data.shape} with {len(labels)} labels; expected (n, 3072)"
                               " and n")
    return data.reshape(-1, 3, 32, 32), labels


def _locate(data_dir: str | Path) -> tuple[Path | None, Path | None, list[Path]]:
    roots = [Path(data_dir), Path(data_dir) / "cifar10"]
    for root in roots:
        folder = root / CIFAR10_FOLDER
        if all((folder / member).is_file() for member in CIFAR10_BATCHES):
            return None, folder, roots
        if (root / CIFAR10_ARCHIVE.name).is_file():
            return root / CIFAR10_ARCHIVE.name, None, roots
    return None, None, roots


def _read_archive(archive: Path) -> dict[str, bytes]:
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for info in tar:
                base = info.name.rsplit("/", 1)[-1]
                if info.isfile() and base in CIFAR10_BATCHES:
                    members[base] = tar.extractfile(info).read()
    except (tarfile.TarError, EOFError, OSError, zlib.error) as err:
        raise CorruptDataError(f"{archive}: damaged or truncated archive ({err}); delete it and fetch it again"
                               ) from err
    missing = [m for m in CIFAR10_BATCHES if m not in members]
    if missing:
        raise CorruptDataError(f"{archive}: archive lacks {', '.join(missing)} (truncated or not the CIFAR-10 archive)")
    return members


def load_cifar10(data_dir: str | Path = "data", verify_checksums: bool = True, download: bool = False
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Read CIFAR-10: ``(x_train (50000, 3, 32, 32) uint8, y_train, x_test, y_test, class_names)``.

    Args:
        data_dir: Where ``cifar-10-python.tar.gz`` (or ``cifar-10-batches-py/``) is, directly or under
            ``cifar10/``.
        verify_checksums: Check the archive's size and md5 (or each extracted batch's md5).
        download: Download the archive from :data:`CIFAR10_URL` into ``data_dir`` when missing.

    Raises:
        DataNotFoundError: No archive or extracted folder (one line: where it looked, how to fetch).
        CorruptDataError: Wrong size/md5, truncated archive, damaged pickle, malformed batch.
        DownloadError: ``download=True`` and the URL cannot be reached.
    """
    archive, folder, roots = _locate(data_dir)
    if archive is None and folder is None:
        if not download:
            looked = [str(r / CIFAR10_ARCHIVE.name) for r in roots] + [str(r / CIFAR10_FOLDER) for r in roots]
            raise DataNotFoundError(missing_message("CIFAR-10 (cifar-10-python.tar.gz)", looked, FETCH))
        archive = download_file(CIFAR10_URL, Path(data_dir) / CIFAR10_ARCHIVE.name, CIFAR10_ARCHIVE)
    if archive is not None:
        if verify_checksums:
            verify_file(archive, CIFAR10_ARCHIVE)
        members = _read_archive(archive)
        where = {m: f"{archive}:{CIFAR10_FOLDER}/{m}" for m in members}
    else:
        members, where = {}, {}
        for member, md5 in CIFAR10_BATCHES.items():
            if verify_checksums:
                verify_file(folder / member, FileSpec(member, md5=md5))
            members[member] = (folder / member).read_bytes()
            where[member] = str(folder / member)
    parts = [_batch_arrays(_unpickle(members[m], where[m]), where[m]) for m in TRAIN_BATCHES]
    x_test, y_test = _batch_arrays(_unpickle(members["test_batch"], where["test_batch"]), where["test_batch"])
    meta = _unpickle(members["batches.meta"], where["batches.meta"])
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in meta.get("label_names", [])]
    x_train = np.concatenate([x for x, _ in parts])
    y_train = np.concatenate([y for _, y in parts])
    return x_train, y_train, x_test, y_test, names


class CIFAR10DataModule(TrainTestPoolDataModule):
    """CIFAR-10 (50,000 + 10,000 32x32 colour images, 10 classes) split among clients.

    Inputs are ``(3, 32, 32)`` float32 (``(3072,)`` with ``flatten``), standardised per channel with
    the training set's mean ``(0.4914, 0.4822, 0.4465)`` and std ``(0.2470, 0.2435, 0.2616)`` when
    ``normalize``. No data augmentation. The whole dataset as float32 takes about 740 MB.

    Args:
        data_dir: Where ``cifar-10-python.tar.gz`` (or ``cifar-10-batches-py/``) is, directly or in
            ``cifar10/``.
        num_clients: Number of clients.
        partition: A :class:`~lightning_fl.datamodules.partitions.Partition` (``IID``, ``Dirichlet``,
            ``Shards``, ``Quantity``); ``None`` is ``IID()``.
        test_set: ``official`` (partition the 50,000 training images; deal the 10,000 test images to
            clients by label) or ``pooled`` (pool all 60,000; per-client ``test_fraction`` split).
        flatten: ``(3072,)`` inputs.
        normalize: Standardise per channel instead of scaling to ``[0, 1]``.
        subsample: Fraction of each split kept (class-stratified, seeded); or one fraction per class.
        download: Download the archive from the URL when missing (md5-checked; needs internet).
        verify_checksums: Check size and md5 of the archive or batches.
        seed: Seed of subsample, partition, test deal and train/test split.
        test_fraction: Per-client test fraction with ``test_set: pooled``.
        val_fraction: Fraction of each client's training samples (its share of the official training
            file with ``test_set: official``) moved to its validation split; ``0``: none.

    Raises:
        DataNotFoundError: At setup, when neither archive nor folder exists.
        CorruptDataError: At setup, for a damaged or truncated file.
    """

    MEAN = (0.4914, 0.4822, 0.4465)
    STD = (0.2470, 0.2435, 0.2616)

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
        self.class_names: list[str] = []

    @override
    def load_train_test(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        x_tr, y_tr, x_te, y_te, self.class_names = load_cifar10(self.data_dir, self.verify_checksums, self.download)
        return torch.from_numpy(x_tr), torch.from_numpy(y_tr), torch.from_numpy(x_te), torch.from_numpy(y_te)


def write_cifar_archive(path: str | Path, batches: dict[str, dict], folder: str = CIFAR10_FOLDER) -> None:
    """Write a CIFAR-style ``tar.gz`` (member name -> dict pickled with bytes keys); for tests and tools."""
    with tarfile.open(path, "w:gz") as tar:
        for name, content in batches.items():
            raw = pickle.dumps({k.encode() if isinstance(k, str) else k: v for k, v in content.items()})
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
