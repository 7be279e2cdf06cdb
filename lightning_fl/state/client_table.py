"""Per-client rows of one declared callback state (SCAFFOLD's ``c_k``, IGFL's ``dW_k_prev``, ...).

A :class:`ClientTable` holds one row per client *seen so far*: nothing is allocated for a client
until its first row is written, so a federation of 3,500 clients costs memory only for those that
trained. Rows are read and written a cohort at a time (:meth:`ClientTable.gather` /
:meth:`ClientTable.scatter`), which is also how a sharded run moves them between processes.
Where the rows live is a :class:`~lightning_fl.state.client_rows.RowStore`: in memory (default) or in
append-only files under the run directory, read row by row (``model.client_state: disk``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from lightning_fl.state.client_rows import DiskRows, MemoryRows, RowStore
from lightning_fl.state.flat_state import FlatStateLayout

#: ``shape`` value meaning "one entry per value of the model's flat state" (``d``).
MODEL = "model"


class ClientTable:
    """Rows ``(*shape)`` per client id, ``default`` for clients never written.

    Args:
        name: The state's name (in messages and file names).
        shape: Shape of one row: a tuple, or ``"model"`` for ``(d,)`` (set by :meth:`bind`).
        default: Value of every entry of a client that has no row yet.
        dtype: Row dtype.
    """

    def __init__(self, name: str, shape: tuple[int, ...] | str = MODEL, default: float = 0.0,
                 dtype: torch.dtype = torch.float32) -> None:
        if shape != MODEL and not isinstance(shape, tuple):
            raise TypeError(f"shape of client state {name!r} must be a tuple or {MODEL!r}; got {shape!r}")
        self.name = name
        self.shape_spec = shape
        self.default = float(default)
        self.dtype = dtype
        self.shape: tuple[int, ...] | None = None if shape == MODEL else shape
        self.rows: RowStore = MemoryRows()

    def bind(self, model_numel: int, make_rows: Callable[[ClientTable], RowStore] | None = None) -> None:
        """Resolve ``"model"`` to ``(model_numel,)`` and choose where rows live (kept rows move along)."""
        self.shape = (model_numel,) if self.shape_spec == MODEL else self.shape_spec
        if make_rows is not None:
            rows = make_rows(self)
            rows.load_state_dict(self._rows_state())
            self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def seen(self, client_ids: Tensor) -> list[bool]:
        """Whether each client of ``client_ids`` has a row."""
        return [int(k) in self.rows for k in client_ids.tolist()]

    def gather(self, client_ids: Tensor, device: torch.device | None = None) -> Tensor:
        """``(C, *shape)`` rows of ``client_ids`` (``default`` for clients without one), in :attr:`dtype`."""
        if self.shape is None:
            raise RuntimeError(f"client state {self.name!r} is not bound to a model yet (bind() runs at set-up)")
        ids = client_ids.tolist()
        out = torch.full((len(ids), *self.shape), self.default, dtype=self.dtype, device=device)
        for i, k in enumerate(ids):
            row = self.rows.get(int(k))
            if row is not None:
                out[i].copy_(row)
        return out

    def gather_by_entry(self, client_ids: Tensor, layout: FlatStateLayout,
                        device: torch.device | None = None) -> dict[str, Tensor]:
        """:meth:`gather` of a ``"model"``-shaped state, as ``(C, *shape)`` views per state entry
        (what client hooks need to correct each parameter)."""
        return layout.unflatten(self.gather(client_ids, device))

    def scatter(self, client_ids: Tensor, rows: Tensor) -> None:
        """Store ``rows`` ``(C, *shape)`` as the rows of ``client_ids`` (copied, detached)."""
        for i, k in enumerate(client_ids.tolist()):
            self.rows.put(int(k), rows[i].detach().to(self.dtype).clone())

    def state_dict(self) -> dict[str, Any]:
        return self.rows.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("store") == "disk" and not isinstance(self.rows, DiskRows):
            # Written with model.client_state: disk, resumed in memory: read the rows it points to.
            reader = DiskRows(None, self.name, self.shape, self.dtype)
            reader.load_state_dict(state)
            state = reader.rows_state()
        self.rows.load_state_dict(state)

    def _rows_state(self) -> dict[str, Any]:
        return self.rows.rows_state() if isinstance(self.rows, DiskRows) else self.rows.state_dict()
