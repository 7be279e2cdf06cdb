"""Where the rows of a :class:`~lightning_fl.client_table.ClientTable` live: memory or disk."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor


class RowStore(ABC):
    """A map from client id to one row tensor."""

    @abstractmethod
    def get(self, client_id: int) -> Tensor | None:
        """The row of ``client_id``, or ``None`` if it has none."""

    @abstractmethod
    def put(self, client_id: int, row: Tensor) -> None:
        """Set the row of ``client_id`` (the store may keep ``row`` itself: callers pass a copy)."""

    @abstractmethod
    def __contains__(self, client_id: int) -> bool: ...

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """A snapshot that later writes cannot change."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class MemoryRows(RowStore):
    """Rows in a dict on the device they were written from; saved as ``ids`` and stacked ``rows``."""

    def __init__(self) -> None:
        self._rows: dict[int, Tensor] = {}

    def get(self, client_id: int) -> Tensor | None:
        return self._rows.get(client_id)

    def put(self, client_id: int, row: Tensor) -> None:
        self._rows[client_id] = row

    def __contains__(self, client_id: int) -> bool:
        return client_id in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def state_dict(self) -> dict[str, Any]:
        ids = sorted(self._rows)
        rows = torch.stack([self._rows[k] for k in ids]).clone() if ids else None
        return {"ids": torch.tensor(ids, dtype=torch.long), "rows": rows}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rows = state.get("rows")
        self._rows = {int(k): rows[i].clone() for i, k in enumerate(state["ids"].tolist())}


class DiskRows(RowStore):
    """Rows in an append-only file under the run directory, read back through a memory map.

    For per-client state too large for RAM (SCAFFOLD controls or IGFL deltas of thousands of clients
    of a large model). A write appends the row to ``<directory>/<name>.rows`` and points the client's
    index entry at it; bytes once written never change. So a checkpoint holds only the small index
    (file and offset per client), and a later round cannot change what an earlier checkpoint sees:
    resuming from it reads the rows as they were (from the original run's directory).

    Old row versions are garbage; when they outweigh the live rows, the live rows are copied to a new
    file and files no longer referenced by the live index or by the last saved snapshot are deleted.
    Resume therefore works from the most recent checkpoint (``last.ckpt``); an older one may point to
    a deleted file, which :meth:`load_state_dict` reports by name.

    Args:
        directory: Where the files live (created on first write).
        name: File-name stem (the state's name).
        shape: Shape of one row.
        dtype: Row dtype.
    """

    def __init__(self, directory: Path, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        self.directory, self.name, self.shape, self.dtype = Path(directory), name, tuple(shape), dtype
        self.row_bytes = int(np.prod(shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
        self._index: dict[int, tuple[str, int]] = {}  # client -> (file, byte offset)
        self._generation = 0
        self._file: Path | None = None
        self._maps: dict[str, np.memmap] = {}
        self._pinned: set[str] = set()

    # ------------------------------------------------------------------ rows
    def get(self, client_id: int) -> Tensor | None:
        entry = self._index.get(client_id)
        if entry is None:
            return None
        file, offset = entry
        view = self._map(file, offset + self.row_bytes)[offset : offset + self.row_bytes]
        return torch.frombuffer(bytearray(view), dtype=self.dtype).view(self.shape)

    def put(self, client_id: int, row: Tensor) -> None:
        file = self._writable()
        data = row.detach().to("cpu", self.dtype).contiguous().view(torch.uint8).numpy().tobytes()
        with open(file, "ab") as handle:
            offset = handle.tell()
            handle.write(data)
        self._index[client_id] = (str(file), offset)
        if file.stat().st_size > 4 * self.row_bytes * max(len(self._index), 16):
            self._compact()

    def __contains__(self, client_id: int) -> bool:
        return client_id in self._index

    def __len__(self) -> int:
        return len(self._index)

    # ------------------------------------------------------------------ files
    def _writable(self) -> Path:
        if self._file is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._file = self.directory / f"{self.name}.{self._generation}.rows"
        return self._file

    def _map(self, file: str, needed: int) -> np.memmap:
        mapped = self._maps.get(file)
        if mapped is None or len(mapped) < needed:
            if not os.path.exists(file):
                raise FileNotFoundError(f"client state file {file} is missing (needed by client state {self.name})")
            mapped = self._maps[file] = np.memmap(file, dtype=np.uint8, mode="r")
        return mapped

    def _compact(self) -> None:
        """Copy the live rows to a new file; delete own files no index still needs."""
        rows = {k: self.get(k) for k in sorted(self._index)}
        self._generation += 1
        self._file = None
        self._maps.clear()
        for k, row in rows.items():
            file = self._writable()
            with open(file, "ab") as handle:
                offset = handle.tell()
                handle.write(row.contiguous().view(torch.uint8).numpy().tobytes())
            self._index[k] = (str(file), offset)
        keep = {f for f, _ in self._index.values()} | self._pinned
        for old in self.directory.glob(f"{self.name}.*.rows"):
            if str(old) not in keep:
                old.unlink()

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        files = sorted({f for f, _ in self._index.values()})
        self._pinned = set(files)  # the snapshot a checkpoint now refers to stays on disk
        ids = sorted(self._index)
        return {"store": "disk", "files": files,
                "ids": torch.tensor(ids, dtype=torch.long),
                "file_index": torch.tensor([files.index(self._index[k][0]) for k in ids], dtype=torch.long),
                "offsets": torch.tensor([self._index[k][1] for k in ids], dtype=torch.long)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("store") != "disk":  # rows saved by a memory store: write them to disk
            self._index.clear()
            rows = state.get("rows")
            for i, k in enumerate(state["ids"].tolist()):
                self.put(int(k), rows[i])
            return
        files = list(state["files"])
        for file in files:
            if not os.path.exists(file):
                raise FileNotFoundError(f"client state file {file} referenced by the checkpoint is missing;"
                                        " with model.client_state: disk resume from the last checkpoint")
        self._index = {int(k): (files[int(f)], int(o)) for k, f, o in
                       zip(state["ids"].tolist(), state["file_index"].tolist(), state["offsets"].tolist())}
        self._pinned = set(files)
        self._maps.clear()

    def rows_state(self) -> dict[str, Any]:
        """The rows themselves, as a :class:`MemoryRows` would save them (for moving between stores)."""
        ids = sorted(self._index)
        rows = torch.stack([self.get(k) for k in ids]) if ids else None
        return {"ids": torch.tensor(ids, dtype=torch.long), "rows": rows}
