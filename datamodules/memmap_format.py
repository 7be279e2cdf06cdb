"""A federation on disk as memory-mappable arrays and the checks that open it (docs/datasets.md).

One folder holds, for ``split`` in ``train`` and ``test``:

* ``<split>_x.npy``: every client's inputs, ``(rows, *input_shape)``, clients one after another;
* ``<split>_y.npy``: their labels, ``(rows,)`` integers (or float targets when ``num_classes`` is 0);
* ``<split>_offsets.npy``: ``N + 1`` int64; client ``k``'s rows are ``[offsets[k], offsets[k + 1])``;

and ``federation.json`` (format, version, ``num_clients``, ``num_classes``, ``input_shape``, the dtypes).
:func:`open_federation` opens the arrays with ``np.load(..., mmap_mode="r")`` (nothing is read but the
offsets and, once, the labels' range) and refuses a folder that is not such a federation with one line
naming ``data.folder``. :mod:`lightning_fl.datamodules.memmap_files` writes one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lightning_fl.faults.validation import ConfigError

__all__ = ["FORMAT", "HEADER", "SPLITS_ON_DISK", "VERSION", "FederationFiles", "array_names", "check_labels",
           "check_offsets", "open_federation"]

#: What ``federation.json``'s ``format`` says, and the version this code reads and writes.
FORMAT, VERSION = "lightning_fl.federation", 1
HEADER = "federation.json"
#: The splits a folder holds (the validation split is drawn per client when the federation is read).
SPLITS_ON_DISK = ("train", "test")
#: Labels checked per chunk at set-up: the range check reads every label once, in bounded memory.
LABEL_CHUNK = 1 << 22
_FIELD = "data.folder"


def array_names(split: str) -> tuple[str, str, str]:
    """The ``x``, ``y`` and offsets file names of ``split``.

    Example:
        >>> array_names("test")
        ('test_x.npy', 'test_y.npy', 'test_offsets.npy')
    """
    return f"{split}_x.npy", f"{split}_y.npy", f"{split}_offsets.npy"


def check_offsets(offsets: np.ndarray, rows: int, name: str) -> None:
    """One line (``ConfigError``) unless ``offsets`` run from 0 to ``rows``, never decreasing, as int64.

    Example:
        >>> check_offsets(np.array([0, 2, 2, 5]), 5, "train_offsets.npy")
        >>> check_offsets(np.array([0, 3, 2, 5]), 5, "train_offsets.npy")
        Traceback (most recent call last):
        ...
        lightning_fl.faults.validation.ConfigError: data.folder: train_offsets.npy must be non-decreasing (client k's rows are [offsets[k], offsets[k+1])); offsets[1] = 3 > offsets[2] = 2
    """
    if offsets.ndim != 1 or len(offsets) < 2 or offsets.dtype != np.int64:
        raise ConfigError(f"{_FIELD}: {name} must be N + 1 int64 offsets (N >= 1 clients); got dtype {offsets.dtype}"
                          f" and shape {offsets.shape}")
    if int(offsets[0]) != 0:
        raise ConfigError(f"{_FIELD}: {name} must start at 0; got offsets[0] = {int(offsets[0])}")
    falls = np.flatnonzero(np.diff(offsets) < 0)
    if len(falls):
        k = int(falls[0])
        raise ConfigError(f"{_FIELD}: {name} must be non-decreasing (client k's rows are [offsets[k], offsets[k+1]));"
                          f" offsets[{k}] = {int(offsets[k])} > offsets[{k + 1}] = {int(offsets[k + 1])}")
    if int(offsets[-1]) != rows:
        raise ConfigError(f"{_FIELD}: {name} must end at the {rows} rows of its arrays; got offsets[-1] ="
                          f" {int(offsets[-1])}")


def check_labels(y: np.ndarray, num_classes: int, name: str, chunk: int = LABEL_CHUNK) -> None:
    """One line unless every label of ``y`` is an integer in ``[0, num_classes)`` (read ``chunk`` rows at a time).

    Example:
        >>> check_labels(np.array([0, 2, 1]), 3, "train_y.npy")
        >>> check_labels(np.array([0, 3, 1]), 3, "train_y.npy")
        Traceback (most recent call last):
        ...
        lightning_fl.faults.validation.ConfigError: data.folder: train_y.npy holds label 3 at row 1, outside [0, 3) (num_classes in federation.json)
    """
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise ConfigError(f"{_FIELD}: {name} must hold one integer label per row; got dtype {y.dtype} and shape"
                          f" {y.shape}")
    for start in range(0, len(y), chunk):
        part = np.asarray(y[start:start + chunk])
        bad = np.flatnonzero((part < 0) | (part >= num_classes))
        if len(bad):
            row = start + int(bad[0])
            raise ConfigError(f"{_FIELD}: {name} holds label {int(y[row])} at row {row}, outside [0, {num_classes})"
                              f" (num_classes in {HEADER})")


@dataclass(frozen=True)
class FederationFiles:
    """An opened federation folder: its header, its ``x``/``y`` arrays (memory-mapped or loaded) and offsets.

    Attributes:
        folder: The folder.
        header: ``federation.json``'s contents.
        x: ``split -> (rows, *input_shape)`` array.
        y: ``split -> (rows, ...)`` array.
        offsets: ``split -> (N + 1,)`` ``long`` tensor.
    """

    folder: Path
    header: dict[str, Any]
    x: dict[str, np.ndarray]
    y: dict[str, np.ndarray]
    offsets: dict[str, Tensor]

    @property
    def num_clients(self) -> int:
        return len(self.offsets["train"]) - 1

    @property
    def num_classes(self) -> int:
        return int(self.header["num_classes"])

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.header["input_shape"])


def _read_header(folder: Path) -> dict[str, Any]:
    try:
        header = json.loads((folder / HEADER).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"{_FIELD}: {folder / HEADER} cannot be read as JSON ({err})") from err
    keys = {"format", "version", "num_clients", "num_classes", "input_shape", "x_dtype", "y_dtype"}
    if not isinstance(header, dict) or header.get("format") != FORMAT or header.get("version") != VERSION:
        raise ConfigError(f"{_FIELD}: {folder / HEADER} must say format {FORMAT!r}, version {VERSION}; got"
                          f" {header.get('format') if isinstance(header, dict) else header!r},"
                          f" {header.get('version') if isinstance(header, dict) else ''}")
    if not keys <= set(header):
        raise ConfigError(f"{_FIELD}: {folder / HEADER} lacks {', '.join(sorted(keys - set(header)))}; it must hold"
                          f" {', '.join(sorted(keys))}")
    counts = (header["num_clients"], header["num_classes"])
    if any(not isinstance(c, int) or isinstance(c, bool) or c < 0 for c in counts) or counts[0] < 1:
        raise ConfigError(f"{_FIELD}: {HEADER}'s num_clients must be an integer >= 1 and num_classes >= 0 (0: float"
                          f" targets); got {counts[0]!r} and {counts[1]!r}")
    return header


def _load(folder: Path, name: str, mmap: bool) -> np.ndarray:
    path = folder / name
    if not path.is_file():
        raise ConfigError(f"{_FIELD}: {folder} has no {name} (a federation folder holds {HEADER} and"
                          f" {', '.join(n for s in SPLITS_ON_DISK for n in array_names(s))})")
    try:
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{_FIELD}: {path} is not a .npy array ({err})") from err
    if not array.dtype.isnative:  # torch reads native byte order only
        raise ConfigError(f"{_FIELD}: {path} has byte order {array.dtype.str}; it must be this machine's (as np.save"
                          " writes it)")
    return array


def _check_split(folder: Path, header: dict[str, Any], split: str, x: np.ndarray, y: np.ndarray,
                 offsets: np.ndarray) -> None:
    """The checks of one split's three arrays against each other and the header."""
    x_name, y_name, off_name = array_names(split)
    if len(x) != len(y):
        raise ConfigError(f"{_FIELD}: {x_name} has {len(x)} rows but {y_name} {len(y)}; they must have one row per"
                          " sample")
    check_offsets(offsets, len(x), off_name)
    if list(x.shape[1:]) != list(header["input_shape"]) or str(x.dtype) != header["x_dtype"]:
        raise ConfigError(f"{_FIELD}: {x_name} holds {x.dtype} rows of shape {x.shape[1:]}; {HEADER} says"
                          f" {header['x_dtype']} of shape {tuple(header['input_shape'])}")
    if str(y.dtype) != header["y_dtype"]:
        raise ConfigError(f"{_FIELD}: {y_name} holds {y.dtype}; {HEADER} says {header['y_dtype']}")
    try:
        torch.from_numpy(np.array(x[:1]))
    except TypeError as err:
        raise ConfigError(f"{_FIELD}: {x_name} has dtype {x.dtype}, which torch cannot hold ({err})") from err
    if header["num_classes"] > 0:
        check_labels(y, header["num_classes"], y_name)
    elif not np.issubdtype(y.dtype, np.floating):
        raise ConfigError(f"{_FIELD}: {y_name} must hold float targets when num_classes is 0; got {y.dtype}")


def open_federation(folder: str | Path, mmap: bool = True) -> FederationFiles:
    """Open and check a federation folder (see the module docstring): one ``ConfigError`` line for any fault.

    Args:
        folder: The folder :func:`~lightning_fl.datamodules.memmap_files.write_federation` wrote.
        mmap: Map the ``x``/``y`` arrays (``np.load(mmap_mode="r")``: no sample is read); ``False`` loads them.

    Raises:
        ConfigError: For a missing folder or file, a header that is not this format's, offsets that do not
            start at 0, decrease or do not end at the arrays' rows, ``x`` and ``y`` of different row counts,
            labels outside ``[0, num_classes)``, train and test offsets of different client counts, or a
            client without a training sample.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"{_FIELD}: no federation folder {folder} (write one with: python -m"
                          f" lightning_fl.datamodules.memmap_files --config <config.yaml> --out {folder})")
    header = _read_header(folder)
    xs, ys, offsets = {}, {}, {}
    for split in SPLITS_ON_DISK:
        x_name, y_name, off_name = array_names(split)
        xs[split], ys[split] = _load(folder, x_name, mmap), _load(folder, y_name, mmap)
        off = np.asarray(_load(folder, off_name, mmap=False))
        _check_split(folder, header, split, xs[split], ys[split], off)
        offsets[split] = torch.from_numpy(np.array(off))
    clients = {split: len(off) - 1 for split, off in offsets.items()}
    if clients["train"] != clients["test"] or clients["train"] != header["num_clients"]:
        raise ConfigError(f"{_FIELD}: train_offsets.npy describes {clients['train']} clients and test_offsets.npy"
                          f" {clients['test']}; both must describe the num_clients = {header['num_clients']} of"
                          f" {HEADER}")
    empty = torch.nonzero(offsets["train"].diff() <= 0)
    if len(empty):
        raise ConfigError(f"{_FIELD}: client {int(empty[0])} has no training sample (train_offsets.npy); every client"
                          " needs at least one")
    return FederationFiles(folder, header, xs, ys, offsets)
