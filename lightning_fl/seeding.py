"""Counter-based seeds: every random stream is a pure function of (seed, round, client, ...).

Deriving each stream from its coordinates instead of advancing one shared generator is what makes
resumption exact without checkpointing generator state, and makes the sequential and vectorized
engines draw identical batches for the same client in the same round.
"""

from __future__ import annotations

import hashlib

import torch


def derive_seed(*keys: int | str) -> int:
    """A 63-bit seed determined by ``keys`` (stable across processes and Python versions)."""
    digest = hashlib.blake2b(repr(keys).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def generator_for(*keys: int | str) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded from ``keys``."""
    return torch.Generator().manual_seed(derive_seed(*keys))
