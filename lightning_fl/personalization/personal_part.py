"""Which entries of a model are a client's own: the personal part ``P`` (docs/algorithms.md, Personalization).

Pure functions over the flat layout of the model state (:class:`~lightning_fl.state.flat_state.FlatStateLayout`):
a part is a set of state-entry names and its ``(d,)`` mask, and a personal model is ``w^t`` with the
client's entries of ``P`` in place.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor
from torch.nn.modules.batchnorm import _BatchNorm

from lightning_fl.faults.validation import ConfigError, check_choice
from lightning_fl.state.flat_state import FlatStateLayout

#: The personal parts a method may keep (docs/algorithms.md, Personalization, Personal state).
PARTS = ("full", "head", "bn")


def batchnorm_entries(model: torch.nn.Module) -> frozenset[str]:
    """State-dict names of every ``_BatchNorm`` module's parameters and buffers (FedBN's ``bn`` part)."""
    names = set()
    for prefix, module in model.named_modules():
        if isinstance(module, _BatchNorm):
            names.update(f"{prefix}.{key}" if prefix else key for key in module.state_dict())
    return frozenset(names)


def part_names(layout: FlatStateLayout, part: str, head_prefixes: Iterable[str] = (),
               bn_entries: Iterable[str] = (), bn_match: str = "module", field: str = "head_prefixes") -> frozenset[str]:
    """The floating-point state entries of personal part ``part``.

    Args:
        layout: The model's flat layout.
        part: ``full`` (every float entry), ``head`` (entries starting with a head prefix) or ``bn``.
        head_prefixes: The head's name prefixes (``part == "head"``).
        bn_entries: BatchNorm entries (:func:`batchnorm_entries`), for ``bn`` with ``bn_match: module``.
        bn_match: ``module`` (entries of ``_BatchNorm`` modules) or ``name`` (entries whose name contains
            ``bn``, as the FedBN and PFLlib code select them).
        field: The config field named in errors.

    Raises:
        ConfigError: If a head prefix names no entry, the head is the whole model, or ``bn`` finds none.
    """
    check_choice("personal part", part, PARTS)
    names = [e.name for e in layout.float_entries]
    if part == "full":
        return frozenset(names)
    if part == "head":
        prefixes = tuple(head_prefixes)
        if not prefixes:
            raise ConfigError(f"{field}: the model declares no head (no nn.Linear layer); set {field} to the name"
                              f" prefixes of its head, e.g. ['fc.']; entries: {', '.join(names)}")
        for prefix in prefixes:
            if not any(n.startswith(prefix) for n in names):
                raise ConfigError(f"{field}: {prefix!r} names no parameter of the model; its entries are"
                                  f" {', '.join(names)}")
        head = frozenset(n for n in names if n.startswith(prefixes))
        if len(head) == len(names):
            raise ConfigError(f"{field}: {list(prefixes)} covers the whole model, leaving no body to share; name"
                              " only the head's prefixes (or use Local)")
        return head
    check_choice("bn_match", bn_match, ("module", "name"))
    chosen = set(bn_entries) if bn_match == "module" else {n for n in names if "bn" in n}
    bn = frozenset(n for n in names if n in chosen)
    if not bn:
        raise ConfigError("FedBN: the model has no BatchNorm layer (bn_match: module) and no entry named '*bn*'"
                          f" (bn_match: name); entries: {', '.join(names)}")
    return bn


def part_mask(layout: FlatStateLayout, names: Iterable[str], device: torch.device | None = None) -> Tensor:
    """``(d,)`` bool: the flat entries of ``names``."""
    mask = torch.zeros(layout.numel, dtype=torch.bool, device=device)
    wanted = set(names)
    for entry in layout.float_entries:
        if entry.name in wanted:
            mask[entry.start : entry.stop] = True
    return mask

