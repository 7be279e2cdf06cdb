"""Where per-client state lives: in memory, or in append-only files on disk read through memory maps.

Two kinds of per-client values: fixed-shape rows of a declared
:class:`~lightning_fl.client_table.ClientTable` (SCAFFOLD's ``c_k``, IGFL's ``dW_k_prev``, ...) and
whole objects (each client's kept optimizer ``state_dict``). Both map a client id to its value and
save a snapshot that later writes cannot change.

On disk (``model.client_state: disk``) a write appends the value's bytes to a file under the run
directory and points the client's index entry at them; bytes once written never change. A
checkpoint therefore holds only the small index (file, offset, length per client), and a later round
cannot change what an earlier checkpoint sees. Old versions are garbage; when they outweigh the live
values, the live values are copied to a new file and files referenced neither by the live index nor
by the last saved snapshot are deleted. Resume therefore works from the most recent checkpoint
(``last.ckpt``); an older one may point to a deleted file, which loading reports by name.
"""

from __future__ import annotations

import io
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor


class RowStore(ABC):
    """A map from client id to one value (a row tensor, or any ``torch.save``-able object)."""

    @abstractmethod
    def get(self, client_id: int) -> Any | None:
        """The value of ``client_id``, or ``None`` if it has none."""

    @abstractmethod
    def put(self, client_id: int, value: Any) -> None:
        """Set the value of ``client_id`` (the store may keep ``value`` itself: callers pass a copy)."""

    @abstractmethod
    def __contains__(self, client_id: int) -> bool: ...

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """A snapshot that later writes cannot change."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class _InMemory(RowStore):
    """Values in a dict (rows stay on the device they were written from)."""

    def __init__(self) -> None:
        self._values: dict[int, Any] = {}

    def get(self, client_id: int) -> Any | None:
        return self._values.get(client_id)

    def put(self, client_id: int, value: Any) -> None:
        self._values[client_id] = value

    def __contains__(self, client_id: int) -> bool:
        return client_id in self._values

    def __len__(self) -> int:
        return len(self._values)


class MemoryRows(_InMemory):
    """Fixed-shape rows in memory; saved as ``ids`` and stacked ``rows``."""

    def state_dict(self) -> dict[str, Any]:
        ids = sorted(self._values)
        rows = torch.stack([self._values[k] for k in ids]).clone() if ids else None
        return {"ids": torch.tensor(ids, dtype=torch.long), "rows": rows}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rows = state.get("rows")
        self._values = {int(k): rows[i].clone() for i, k in enumerate(state["ids"].tolist())}


class MemoryObjects(_InMemory):
    """Whole per-client objects (kept optimizer states) in memory; saved as the dict."""

    def state_dict(self) -> dict[str, Any]:
        return {"objects": dict(self._values)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._values = {int(k): v for k, v in state["objects"].items()}


class AppendOnlyLog:
    """Values as byte strings appended to ``<directory>/<name>.<generation>.log`` (see the module docstring).

    Args:
        directory: Where the files live (created on first write).
        name: File-name stem.
    """

    def __init__(self, directory: Path, name: str) -> None:
        self.directory, self.name = Path(directory), name
        self.index: dict[int, tuple[str, int, int]] = {}  # client -> (file, byte offset, length)
        self._generation = 0
        self._file: Path | None = None
        self._maps: dict[str, np.memmap] = {}
        self._pinned: set[str] = set()

    def read(self, client_id: int) -> bytes | None:
        entry = self.index.get(client_id)
        if entry is None:
            return None
        file, offset, length = entry
        mapped = self._maps.get(file)
        if mapped is None or len(mapped) < offset + length:
            if not os.path.exists(file):
                raise FileNotFoundError(f"client state file {file} is missing")
            mapped = self._maps[file] = np.memmap(file, dtype=np.uint8, mode="r")
        return mapped[offset : offset + length].tobytes()

    def append(self, client_id: int, data: bytes) -> None:
        self._write(client_id, data)
        live = sum(length for _, _, length in self.index.values())
        if self._file.stat().st_size > 4 * max(live, 16 * len(data)):
            self._compact()

    def _write(self, client_id: int, data: bytes) -> None:
        if self._file is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._file = self.directory / f"{self.name}.{self._generation}.log"
        with open(self._file, "ab") as handle:
            offset = handle.tell()
            handle.write(data)
        self.index[client_id] = (str(self._file), offset, len(data))

    def _compact(self) -> None:
        """Copy the live values to a new file; delete own files no index still needs."""
        live = {k: self.read(k) for k in sorted(self.index)}
        self._generation += 1
        self._file = None
        self._maps.clear()
        for k, data in live.items():
            self._write(k, data)
        keep = {f for f, _, _ in self.index.values()} | self._pinned
        for old in self.directory.glob(f"{self.name}.*.log"):
            if str(old) not in keep:
                old.unlink()

    def state_dict(self) -> dict[str, Any]:
        files = sorted({f for f, _, _ in self.index.values()})
        self._pinned = set(files)  # the snapshot a checkpoint now refers to stays on disk
        ids = sorted(self.index)
        return {"store": "disk", "files": files, "ids": torch.tensor(ids, dtype=torch.long),
                "file_index": torch.tensor([files.index(self.index[k][0]) for k in ids], dtype=torch.long),
                "offsets": torch.tensor([self.index[k][1] for k in ids], dtype=torch.long),
                "lengths": torch.tensor([self.index[k][2] for k in ids], dtype=torch.long)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        files = list(state["files"])
        for file in files:
            if not os.path.exists(file):
                raise FileNotFoundError(f"client state file {file} referenced by the checkpoint is missing;"
                                        " with model.client_state: disk resume from the latest checkpoint")
        self.index = {int(k): (files[int(f)], int(o), int(n)) for k, f, o, n in zip(
            state["ids"].tolist(), state["file_index"].tolist(), state["offsets"].tolist(), state["lengths"].tolist())}
        self._pinned = set(files)
        self._maps.clear()


class _OnDisk(RowStore):
    """Values as bytes in an :class:`AppendOnlyLog`; subclasses say how a value becomes bytes."""

    def __init__(self, directory: Path, name: str) -> None:
        self.log = AppendOnlyLog(directory, name)

    @abstractmethod
    def _encode(self, value: Any) -> bytes: ...

    @abstractmethod
    def _decode(self, data: bytes) -> Any: ...

    @abstractmethod
    def _load_in_memory_state(self, state: dict[str, Any]) -> None:
        """Write the values of a memory store's ``state_dict`` to disk."""

    def get(self, client_id: int) -> Any | None:
        data = self.log.read(client_id)
        return None if data is None else self._decode(data)

    def put(self, client_id: int, value: Any) -> None:
        self.log.append(client_id, self._encode(value))

    def __contains__(self, client_id: int) -> bool:
        return client_id in self.log.index

    def __len__(self) -> int:
        return len(self.log.index)

    def state_dict(self) -> dict[str, Any]:
        return self.log.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("store") == "disk":
            self.log.load_state_dict(state)
        else:
            self.log.index.clear()
            self._load_in_memory_state(state)


class DiskRows(_OnDisk):
    """Fixed-shape rows on disk (``model.client_state: disk``).

    Args:
        directory: Where the files live.
        name: File-name stem (the state's name).
        shape: Shape of one row.
        dtype: Row dtype.
    """

    def __init__(self, directory: Path, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        super().__init__(directory, name)
        self.shape, self.dtype = tuple(shape), dtype

    def _encode(self, value: Tensor) -> bytes:
        # reshape(-1): a 0-d row (a scalar per client, e.g. FedAdp's angle) cannot be viewed as bytes itself.
        return value.detach().to("cpu", self.dtype).reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()

    def _decode(self, data: bytes) -> Tensor:
        return torch.frombuffer(bytearray(data), dtype=self.dtype).view(self.shape)

    def _load_in_memory_state(self, state: dict[str, Any]) -> None:
        rows = state.get("rows")
        for i, k in enumerate(state["ids"].tolist()):
            self.put(int(k), rows[i])

    def rows_state(self) -> dict[str, Any]:
        """The rows themselves, as a :class:`MemoryRows` would save them (for moving between stores)."""
        ids = sorted(self.log.index)
        rows = torch.stack([self.get(k) for k in ids]) if ids else None
        return {"ids": torch.tensor(ids, dtype=torch.long), "rows": rows}


class DiskObjects(_OnDisk):
    """Whole per-client objects (kept optimizer states), ``torch.save``-d on disk."""

    def _encode(self, value: Any) -> bytes:
        buffer = io.BytesIO()
        torch.save(value, buffer)
        return buffer.getvalue()

    def _decode(self, data: bytes) -> Any:
        return torch.load(io.BytesIO(data), weights_only=True)

    def _load_in_memory_state(self, state: dict[str, Any]) -> None:
        for k, value in state["objects"].items():
            self.put(int(k), value)

    def objects_state(self) -> dict[str, Any]:
        """The objects themselves, as :class:`MemoryObjects` would save them."""
        return {"objects": {k: self.get(k) for k in sorted(self.log.index)}}
