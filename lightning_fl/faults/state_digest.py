"""A sha256 digest of a checkpoint's contents, the same before ``torch.save`` and after ``torch.load``.

``torch.load`` does not check the bytes of a tensor against anything: a checkpoint with a few flipped
bytes in a weight loads without complaint and resumes a run from nonsense (a FedFa server momentum of
``2e23``). The checkpoint therefore carries a digest of what it holds, computed by walking the
checkpoint dictionary in a fixed order, and loading recomputes it.

The walk hashes what survives a save/load round trip exactly and nothing that does not:

- mappings in their insertion order (pickle keeps it), keys and values;
- lists and tuples in order; sets by their members' digests, sorted (their order varies by process);
- tensors (and numpy arrays) by dtype, shape and raw bytes, wherever they live;
- ``None``, booleans, numbers, strings and bytes by type and ``repr`` (``repr`` of a float round-trips);
- any other object by its type name only: its ``repr`` may hold a memory address that differs after
  loading. Checkpoints written by this project contain no such objects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

import numpy as np
import torch

#: Hashed as type name and ``repr``, so ``1``, ``1.0``, ``True`` and ``"1"`` differ.
_PRIMITIVES = (type(None), bool, int, float, complex, str, bytes)


def state_digest(state: Any) -> str:
    """The hex sha256 digest of ``state`` (see the module docstring for what it covers)."""
    digest = hashlib.sha256()
    _update(digest, state)
    return digest.hexdigest()


def _update(digest: Any, value: Any) -> None:  # hashlib's type is private
    if isinstance(value, torch.Tensor):
        _tensor(digest, value)
    elif isinstance(value, np.ndarray):
        _tag(digest, f"ndarray:{value.dtype.str}:{value.shape}")
        if value.dtype != object:  # an array of Python objects counts by its label only
            digest.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, _PRIMITIVES) or isinstance(value, np.generic):
        _tag(digest, f"{type(value).__name__}:{value!r}")
    elif isinstance(value, Mapping):
        _tag(digest, f"map:{len(value)}")
        for key, item in value.items():
            _update(digest, key)
            _update(digest, item)
    elif isinstance(value, (list, tuple)):
        _tag(digest, f"{type(value).__name__}:{len(value)}")
        for item in value:
            _update(digest, item)
    elif isinstance(value, (set, frozenset)):
        _tag(digest, f"set:{len(value)}")
        for member in sorted(state_digest(item) for item in value):
            _tag(digest, member)
    elif isinstance(value, PurePath):
        _tag(digest, f"path:{value}")
    else:
        _tag(digest, f"object:{type(value).__module__}.{type(value).__qualname__}")


def _tensor(digest: Any, tensor: torch.Tensor) -> None:
    _tag(digest, f"tensor:{tensor.dtype}:{tuple(tensor.shape)}")
    if tensor.layout != torch.strided or tensor.is_quantized or tensor.device.type == "meta":
        return  # no plain bytes to read; the dtype and shape above still count
    flat = tensor.detach().resolve_conj().resolve_neg().reshape(-1).cpu().contiguous()
    digest.update(flat.view(torch.uint8).numpy().data)


def _tag(digest: Any, text: str) -> None:
    data = text.encode("utf-8", "surrogatepass")
    digest.update(len(data).to_bytes(8, "little"))
    digest.update(data)
