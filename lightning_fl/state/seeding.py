"""Counter-based seeds: every random stream is a pure function of (seed, round, client, ...).

Deriving each stream from its coordinates instead of advancing one shared generator is what makes
resumption exact without checkpointing generator state, and makes the sequential and vectorized
engines draw identical batches for the same client in the same round.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import torch


def derive_seed(*keys: int | str) -> int:
    """A 63-bit seed determined by ``keys`` (stable across processes and Python versions)."""
    digest = hashlib.blake2b(repr(keys).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def generator_for(*keys: int | str) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded from ``keys``."""
    return torch.Generator().manual_seed(derive_seed(*keys))


_GOLDEN = 0x9E3779B97F4A7C15


def client_uniforms(client_ids: torch.Tensor, *keys: int | str) -> torch.Tensor:
    """One uniform draw in ``[0, 1)`` per client, a pure function of ``(keys, client)``.

    Counter-based (a SplitMix64 hash of the stream's seed and the client id), so client ``k``'s draw
    does not depend on which other clients are drawn with it, on their order, or on the process:
    a client's fate in round ``t`` is the same in every engine, after a resume and for any number of
    processes.

    Args:
        client_ids: ``(n,)`` integer client ids.
        keys: The stream, e.g. ``(seed, "dropout", round_idx)``.

    Returns:
        ``(n,)`` float64 on the CPU.

    Example:
        >>> a = client_uniforms(torch.tensor([3, 7]), 0, "dropout", 5)
        >>> bool(a[1] == client_uniforms(torch.tensor([7]), 0, "dropout", 5)[0])
        True
    """
    base = np.uint64(derive_seed(*keys))
    ids = client_ids.detach().cpu().numpy().astype(np.uint64)
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps modulo 2**64 by design
        z = base + (ids + np.uint64(1)) * np.uint64(_GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return torch.from_numpy((z >> np.uint64(11)).astype(np.float64) * 2.0**-53)


def client_normals(client_ids: torch.Tensor, *keys: int | str) -> torch.Tensor:
    """One standard normal draw per client (Box-Muller over two :func:`client_uniforms` streams)."""
    u1 = client_uniforms(client_ids, *keys, "normal-radius")
    u2 = client_uniforms(client_ids, *keys, "normal-angle")
    return torch.sqrt(-2.0 * torch.log1p(-u1)) * torch.cos(2 * math.pi * u2)
