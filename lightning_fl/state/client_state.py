"""Per-client state that outlives a round: participation counts and, optionally, optimizer state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from lightning_fl.state.client_rows import DiskObjects, MemoryObjects, RowStore


class ClientStateStore:
    """What the server remembers about each client between its participations.

    Args:
        num_clients: ``N``.
        keep_optimizer_state: Keep each client's optimizer state (e.g. SGD momentum buffers) between
            its participations instead of starting fresh every round (an option of docs/algorithms.md, Local training).
        directory: Keep those states in append-only files there (``model.client_state: disk``)
            instead of memory; ``None``: memory.
        root: The run folder (a checkpoint names those files relative to it; default: ``directory``).
    """

    def __init__(self, num_clients: int, keep_optimizer_state: bool = False, directory: Path | None = None,
                 root: Path | None = None) -> None:
        self.keep_optimizer_state = keep_optimizer_state
        self.participation = torch.zeros(num_clients, dtype=torch.long)
        self.last_round = torch.full((num_clients,), -1, dtype=torch.long)
        self.optimizer_states: RowStore = (MemoryObjects() if directory is None
                                           else DiskObjects(directory, "optimizer_state", root))
        # States of this round's clients until the round decides who is kept (a diverged client's
        # state is discarded, so its next participation starts from its last good state).
        self.pending: dict[int, dict[str, Any]] = {}

    def upcoming_participation(self, client_ids: Tensor) -> Tensor:
        """``f_k`` of ``client_ids`` if they complete this round (not recorded yet)."""
        return self.participation[client_ids.cpu()] + 1

    def record_participation(self, client_ids: Tensor, round_idx: int) -> Tensor:
        """Count this round for ``client_ids`` (completed participations); returns their counts ``f_k``."""
        ids = client_ids.cpu()
        self.participation[ids] += 1
        self.last_round[ids] = round_idx
        return self.participation[ids].clone()

    def optimizer_state(self, client_id: int) -> dict[str, Any] | None:
        if not self.keep_optimizer_state:
            return None
        return self.pending[client_id] if client_id in self.pending else self.optimizer_states.get(client_id)

    def save_optimizer_state(self, client_id: int, state: dict[str, Any]) -> None:
        """Hold ``client_id``'s state after local training; :meth:`commit` keeps it."""
        if self.keep_optimizer_state:
            self.pending[client_id] = state

    def commit(self, client_ids: Tensor) -> None:
        """Keep the pending optimizer states of ``client_ids``; drop every other pending state."""
        for client in client_ids.tolist():
            if client in self.pending:
                self.optimizer_states.put(client, self.pending[client])
        self.pending.clear()

    def state_dict(self) -> dict[str, Any]:
        return {
            "participation": self.participation.clone(),
            "last_round": self.last_round.clone(),
            "optimizer_states": self.optimizer_states.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.participation = state["participation"].clone()
        self.last_round = state["last_round"].clone()
        saved = state["optimizer_states"]
        if saved.get("store") == "disk" and isinstance(self.optimizer_states, MemoryObjects):
            reader = DiskObjects(None, "optimizer_state")  # written on disk, resumed in memory
            reader.load_state_dict(saved)
            saved = reader.objects_state()
        self.optimizer_states.load_state_dict(saved)


def checkpoint_run_dir(ckpt_path: Any, current: Path) -> Path:
    """The run folder of the checkpoint at ``ckpt_path``: its ``client_state`` files are there.

    That is ``<run>`` for ``<run>/checkpoints/<file>`` (where ModelCheckpoint saves), wherever the
    folder was moved or copied to; for a checkpoint saved elsewhere, the current run's folder ``current``.
    """
    path = Path(str(ckpt_path)) if ckpt_path else None
    return path.parent.parent if path is not None and path.parent.name == "checkpoints" else current
