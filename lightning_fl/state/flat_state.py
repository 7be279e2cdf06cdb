"""Flat views of a model's state: the vector ``w`` that the server-side math works on.

docs/algorithms.md, Notation: the global model is all floating-point parameters and floating-point buffers, kept
in fp32; integer buffers (e.g. BatchNorm ``num_batches_tracked``) are taken from the first cohort
member. ``FlatStateLayout`` records which entries are floating point, their shapes and offsets, so
aggregation callbacks see one ``(d,)`` global vector and one ``(K, d)`` matrix of client weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class _Entry:
    name: str
    shape: torch.Size
    start: int
    stop: int


class FlatStateLayout:
    """Maps a ``state_dict`` to and from a flat fp32 vector of its floating-point entries.

    Args:
        state: A model ``state_dict`` (only names, shapes and dtypes are read).

    Example:
        >>> layout = FlatStateLayout(torch.nn.Linear(3, 2).state_dict())
        >>> layout.numel
        8
    """

    def __init__(self, state: Mapping[str, Tensor]) -> None:
        self.float_entries: list[_Entry] = []
        self.other_names: list[str] = []
        offset = 0
        for name, tensor in state.items():
            if tensor.is_floating_point():
                self.float_entries.append(_Entry(name, tensor.shape, offset, offset + tensor.numel()))
                offset += tensor.numel()
            else:
                self.other_names.append(name)
        self.numel = offset
        self._by_name = {e.name: e for e in self.float_entries}

    def flatten(self, state: Mapping[str, Tensor], out: Tensor | None = None) -> Tensor:
        """Concatenate the floating-point entries of ``state`` into ``out`` (fp32, shape ``(d,)``)."""
        first = state[self.float_entries[0].name]
        if out is None:
            out = torch.empty(self.numel, dtype=torch.float32, device=first.device)
        for e in self.float_entries:
            out[e.start : e.stop].copy_(state[e.name].reshape(-1))
        return out

    def flatten_stacked(self, stacked: Mapping[str, Tensor]) -> Tensor:
        """``(K, d)`` from entries that carry a leading cohort dimension ``(K, *shape)``."""
        return torch.cat([stacked[e.name].reshape(stacked[e.name].shape[0], -1).float() for e in self.float_entries], 1)

    def unflatten(self, vector: Tensor) -> dict[str, Tensor]:
        """Views of ``vector`` (``(d,)`` or ``(K, d)``) shaped like the state entries."""
        lead = vector.shape[:-1]
        return {e.name: vector[..., e.start : e.stop].view(*lead, *e.shape) for e in self.float_entries}

    def load_into(self, vector: Tensor, state: Mapping[str, Tensor]) -> None:
        """Copy ``vector`` into the floating-point tensors of a live ``state`` (in place, dtype cast)."""
        with torch.no_grad():
            for name, value in self.unflatten(vector).items():
                state[name].copy_(value)

    def slice_of(self, name: str) -> slice:
        """The slice of the flat vector that holds entry ``name``."""
        e = self._by_name[name]
        return slice(e.start, e.stop)
