"""A federation read from memory-mapped arrays, the cohort's row slices per round (docs/datasets.md).

:class:`MemmapDataModule` opens a folder written by
:func:`~lightning_fl.datamodules.memmap_files.write_federation` (format:
:mod:`lightning_fl.datamodules.memmap_format`). Lazy (the default), set-up keeps the ``N + 1`` offsets of
each split and the mapped arrays; :meth:`MemmapClientData.stage` copies only the staged clients' rows
``[offsets[k], offsets[k + 1])`` into tensors and moves each client's validation samples out of its
training ones with the per-client split every federation uses. ``lazy: false`` loads every array at
set-up; both give bitwise the same federation.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from typing_extensions import override

from lightning_fl.datamodules.lazy_synthetic import split_sizes
from lightning_fl.datamodules.memmap_format import HEADER, SPLITS_ON_DISK, FederationFiles, array_names, open_federation
from lightning_fl.faults.validation import ConfigError
from lightning_fl.simulation.datamodule import FederatedDataModule
from lightning_fl.state.data import (
    ClientData,
    FederatedData,
    SizedClientData,
    assemble_staged,
    checked_stage_ids,
    client_validation_split,
    offsets_from_sizes,
    staged_splits,
)

__all__ = ["MemmapClientData", "MemmapDataModule", "labels_as_tensor"]


def labels_as_tensor(y: np.ndarray, num_classes: int) -> Tensor:
    """Labels read from disk as the eager federation holds them: ``int64`` classes, float targets as stored.

    Example:
        >>> labels_as_tensor(np.array([2, 0], dtype=np.int32), 3).dtype
        torch.int64
    """
    labels = np.asarray(y, dtype=np.int64) if num_classes > 0 else np.asarray(y)
    # A view of the mapped file is read-only; torch wants memory it may write.
    return torch.from_numpy(labels if labels.flags.writeable else labels.copy())


class MemmapClientData(SizedClientData):
    """An opened federation folder as a lazy :class:`~lightning_fl.state.data.ClientData` source.

    Holds the mapped arrays and the offsets; :meth:`stage` reads the asked clients' rows only.

    Args:
        files: The opened folder (:func:`~lightning_fl.datamodules.memmap_format.open_federation`).
        seed: Seed of the per-client validation split.
        val_fraction: Fraction of each client's training samples moved to validation (``0``: none).
    """

    def __init__(self, files: FederationFiles, seed: int = 0, val_fraction: float = 0.1) -> None:
        self.files, self.seed, self.val_fraction = files, int(seed), float(val_fraction)
        self._num_classes = files.num_classes
        sizes = split_sizes(files.offsets["train"].diff().numpy(), 0.0, self.val_fraction)
        self._sizes = {"train": torch.from_numpy(sizes["train"]), "val": torch.from_numpy(sizes["val"]),
                       "test": files.offsets["test"].diff()}

    @property
    def num_clients(self) -> int:
        return self.files.num_clients

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.files.input_shape

    def rows(self, client: int, split: str) -> tuple[int, int]:
        """Client ``client``'s rows ``[lo, hi)`` in the ``train`` or ``test`` arrays."""
        offsets = self.files.offsets[split]
        return int(offsets[client]), int(offsets[client + 1])

    def _read(self, split: str, client: int) -> tuple[np.ndarray, np.ndarray]:
        # Slicing a memmap maps those rows only; np.array copies them out of the file's pages.
        lo, hi = self.rows(client, split)
        return np.array(self.files.x[split][lo:hi]), np.array(self.files.y[split][lo:hi])

    def client_arrays(self, client: int, wanted: tuple[str, ...]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Client ``client``'s ``(x, y)`` of the splits ``wanted`` (``val`` cut from its training rows)."""
        x, y = self._read("train", client)
        parts = {"train": (x, y)}
        if self.has_validation:
            kept, moved = (i.numpy() for i in client_validation_split(len(y), self.val_fraction, self.seed, client))
            parts = {"train": (x[kept], y[kept]), "val": (x[moved], y[moved])}
        if "test" in wanted:
            parts["test"] = self._read("test", client)
        return {s: parts[s] for s in wanted}

    def _joined(self, parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[Tensor, Tensor, Tensor]:
        """The clients' rows of one split as ``(x, y, offsets)`` tensors, clients in order."""
        if parts:
            x, y = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        else:
            x, y = np.zeros((0, *self.input_shape), self.files.x["train"].dtype), self.files.y["train"][:0]
        return (torch.from_numpy(x), labels_as_tensor(y, self._num_classes),
                offsets_from_sizes([len(p[1]) for p in parts]))

    def stage(self, client_ids: Tensor | list[int], split: str = "train", device: torch.device | str | None = None
              ) -> FederatedData:
        """Copy the rows of ``client_ids`` (in that order) into a federation (see ``ClientData.stage``)."""
        ids = checked_stage_ids(client_ids, split, self.num_clients, self.has_validation).tolist()
        wanted = staged_splits(split)
        parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {s: [] for s in wanted}
        for client in ids:
            for s, arrays in self.client_arrays(client, wanted).items():
                parts[s].append(arrays)
        joined = {s: self._joined(p) for s, p in parts.items()}
        x_empty, y_empty, _ = self._joined([])
        empty = (x_empty, y_empty, torch.zeros(len(ids) + 1, dtype=torch.long))
        return assemble_staged(joined, empty, self._num_classes, device)

    def digest(self) -> str:
        """A SHA-256 of ``federation.json``, the offsets, the array files' sizes and the split options (the resume check).

        The samples' contents are not hashed (that would read every row): a folder whose arrays were
        rewritten with other values of the same dtypes, shapes and client boundaries passes the check.
        """
        digest = hashlib.sha256()
        folder = self.files.folder
        names = [n for s in SPLITS_ON_DISK for n in array_names(s)]
        described = (self.seed, self.val_fraction, [(n, (folder / n).stat().st_size) for n in names])
        digest.update(repr(described).encode())
        digest.update((folder / HEADER).read_bytes())
        for split in SPLITS_ON_DISK:
            digest.update(self.files.offsets[split].numpy().tobytes())
        return digest.hexdigest()


class MemmapDataModule(FederatedDataModule):
    """A federation stored as ``.npy`` arrays with per-client offsets (docs/datasets.md, Memory-mapped federations).

    Args:
        folder: A folder written by :func:`~lightning_fl.datamodules.memmap_files.write_federation`
            (``python -m lightning_fl.datamodules.memmap_files --config C.yaml --out DIR``).
        seed: Seed of the per-client validation split (the one of the configuration the folder was written
            from gives that configuration's federation).
        val_fraction: Fraction of each client's training samples moved to its validation split.
        lazy: Map the arrays and copy the staged clients' rows each round (``True``, the default), or load
            every array at set-up (``False``); the federation is bitwise the same.

    Raises:
        ConfigError: For a ``lazy`` that is not a bool or ``folder`` that is not a path (here), and at set-up,
            before training, for a folder that is not a federation (one line naming ``data.folder``).

    Example (YAML)::

        data:
          class_path: lightning_fl.datamodules.MemmapDataModule
          init_args: {folder: data/memmap/synthetic_1_1, seed: 0, lazy: true}
    """

    def __init__(self, folder: str | Path, seed: int = 0, val_fraction: float = 0.1, lazy: bool = True) -> None:
        super().__init__(seed=seed, test_fraction=0.0, val_fraction=val_fraction)
        if not isinstance(lazy, bool):
            raise ConfigError(f"data.lazy must be true or false; got {lazy!r}")
        if not isinstance(folder, (str, Path)) or not str(folder):
            raise ConfigError(f"data.folder must be the path of a federation folder; got {folder!r}")
        self.folder, self.lazy = Path(folder), lazy

    @override
    def build_source(self) -> ClientData:
        if not self.lazy:
            return super().build_source()
        return MemmapClientData(open_federation(self.folder), self.seed, self.val_fraction)

    @override
    def build_data(self) -> FederatedData:
        files = open_federation(self.folder, mmap=False)
        tensors = {split: (torch.from_numpy(files.x[split]), labels_as_tensor(files.y[split], files.num_classes),
                           files.offsets[split]) for split in SPLITS_ON_DISK}
        return FederatedData(*tensors["train"], *tensors["test"], num_classes=files.num_classes)
