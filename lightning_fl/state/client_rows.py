"""Where per-client state lives: in memory, or in append-only files on disk read row by row.

Two kinds of per-client values: fixed-shape rows of a declared
:class:`~lightning_fl.state.client_table.ClientTable` (SCAFFOLD's ``c_k``, IGFL's ``dW_k_prev``, ...) and
whole objects (each client's kept optimizer ``state_dict``). Both map a client id to its value and
save a snapshot that later writes cannot change.

On disk (``model.client_state: disk``) a write appends the value's bytes to a file under the run
directory (:class:`~lightning_fl.state.append_log.AppendOnlyLog`) and points the client's index entry at
them; a checkpoint holds only the small index (file, offset, length and CRC-32 per client). Resume
works from the most recent checkpoint (``last.ckpt``); an older one may point to a file compacted
away since, which loading reports by name.
"""

from __future__ import annotations

import io
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from lightning_fl.state.append_log import AppendOnlyLog


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


class _OnDisk(RowStore):
    """Values as bytes in an :class:`AppendOnlyLog`; subclasses say how a value becomes bytes."""

    def __init__(self, directory: Path | None, name: str, root: Path | None = None) -> None:
        self.log = AppendOnlyLog(directory, name, root)

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
        directory: Where the files live (``None``: only read a loaded snapshot).
        name: File-name stem (the state's name).
        shape: Shape of one row.
        dtype: Row dtype.
        root: The run folder (a saved index names files relative to it; default: ``directory``).
    """

    def __init__(self, directory: Path | None, name: str, shape: tuple[int, ...], dtype: torch.dtype,
                 root: Path | None = None) -> None:
        super().__init__(directory, name, root)
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


def disk_rows_factory(directory: Path | None, root: Path | None) -> Callable[[Any], RowStore] | None:
    """``make_rows(table)`` for declared client tables kept in ``directory`` (``None``: in memory)."""
    if directory is None:
        return None
    return lambda table: DiskRows(directory, table.name, table.shape, table.dtype, root)
