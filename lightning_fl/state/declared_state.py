"""State declared up front, torchmetrics-style: saving, loading and cohort gather/scatter come free.

A callback declares in ``__init__`` what it remembers between rounds::

    self.add_server_state("momentum")                          # one value (a (d,) tensor later)
    self.add_client_state("control", shape="model", default=0)  # one (d,) row per client seen

Server states are plain attributes (``self.momentum``). A client state is a
:class:`~lightning_fl.state.client_table.ClientTable` attribute (``self.control``) read and written a cohort
at a time. ``state_dict``/``load_state_dict`` cover every declared state, copies in both directions,
so a checkpoint never aliases live state and a resumed run continues bit for bit.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from lightning_fl.state.client_rows import RowStore
from lightning_fl.state.client_table import MODEL, ClientTable


def _copy(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.detach().clone()
    return copy.deepcopy(value)


class DeclaredState:
    """Mixin: declared server and per-client state with free ``state_dict``/``load_state_dict``."""

    def _declared(self) -> tuple[dict[str, Any], dict[str, ClientTable]]:
        # Created on first use, so subclasses may declare before or after calling super().__init__().
        if "_server_defaults" not in self.__dict__:
            self.__dict__["_server_defaults"] = {}
            self.__dict__["_client_tables"] = {}
        return self.__dict__["_server_defaults"], self.__dict__["_client_tables"]

    def add_server_state(self, name: str, default: Any = None) -> None:
        """Declare a server-side state ``self.<name>`` starting at ``default`` (``None``: not yet set)."""
        server, clients = self._declared()
        if name in server or name in clients:
            raise ValueError(f"state {name!r} is declared twice")
        server[name] = _copy(default)
        setattr(self, name, _copy(default))

    def add_client_state(self, name: str, shape: tuple[int, ...] | str = MODEL, default: float = 0.0,
                         dtype: torch.dtype = torch.float32) -> ClientTable:
        """Declare a per-client state ``self.<name>``: rows of ``shape`` (``"model"``: ``(d,)``)."""
        server, clients = self._declared()
        if name in server or name in clients:
            raise ValueError(f"state {name!r} is declared twice")
        table = ClientTable(f"{type(self).__name__}.{name}", shape, default, dtype)
        clients[name] = table
        setattr(self, name, table)
        return table

    @property
    def client_tables(self) -> dict[str, ClientTable]:
        """The declared per-client states by name."""
        return dict(self._declared()[1])

    def bind_client_state(self, model_numel: int, make_rows: Callable[[ClientTable], RowStore] | None = None) -> None:
        """Give every client table its row shape and, optionally, a store (``make_rows(table)``)."""
        for table in self._declared()[1].values():
            table.bind(model_numel, make_rows)

    def reset_state(self) -> None:
        """Every declared state back to its default (client tables emptied)."""
        server, clients = self._declared()
        for name, default in server.items():
            setattr(self, name, _copy(default))
        for table in clients.values():
            table.load_state_dict({"ids": torch.zeros(0, dtype=torch.long), "rows": None})

    def state_dict(self) -> dict[str, Any]:
        server, clients = self._declared()
        return {"server": {name: _copy(getattr(self, name)) for name in server},
                "clients": {name: table.state_dict() for name, table in clients.items()}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        server, clients = self._declared()
        for name in server:
            setattr(self, name, _copy(state_dict["server"][name]))
        for name, table in clients.items():
            table.load_state_dict(state_dict["clients"][name])
