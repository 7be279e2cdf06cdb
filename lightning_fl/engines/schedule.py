"""Per-round batch index tables for training several clients in lock step.

Every engine draws client ``k``'s local epoch ``e`` in the order
``epoch_permutation(seed, t, k, e, n_k)`` and cuts it into ``ceil(n_k / B)`` batches, the last one
possibly partial (docs/algorithms.md, Local training). For a chunk of clients trained together, this module lays those
batches out as rows into the federation's training tensors, with per-sample loss weights
(``1 / |batch|`` for a real sample, ``0`` for padding), so a local step of the whole chunk is one
slice of a staged tensor and no per-client ``DataLoader`` exists.

Clients are ordered by decreasing ``tau_k``: at step ``s`` the clients still training are a prefix
of the chunk, ``active[s]`` long. The tables are *packed*: step ``s`` owns the next
``active[s] * B`` rows (client ``j`` of the prefix at rows ``j * B`` to ``j * B + B`` of its step),
so a chunk of very unequal clients stores ``B * sum_k tau_k`` rows, not ``B * C * max_k tau_k``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from lightning_fl.engines.base import epoch_permutation


@dataclass
class ChunkSchedule:
    """Batches of every local step of a chunk of ``C`` clients, ``T = max_k tau_k`` steps (packed).

    Attributes:
        index: ``(R,)`` long on the training device: rows of ``x_train`` (padding reads the client's
            first sample and carries zero weight), ``R = B * sum_k tau_k``.
        weight: ``(R,)`` float32: ``1 / |batch|`` for real samples, ``0`` for padding, so the weighted
            sum of per-sample losses is each client's mean batch loss.
        final: ``(R,)`` float32: 1 for real samples of each client's final local epoch (the samples
            ``train_acc`` and ``train_loss`` are computed over).
        client: ``(R,)`` long: position in the chunk of each row's client.
        active: Length ``T``: number of clients (a prefix of the chunk) that take step ``s``.
        widths: Length ``T``: rows of step ``s`` (``active[s] * B``).
        has_final: Length ``T``: whether any client takes a step of its final epoch at step ``s``.
    """

    index: Tensor
    weight: Tensor
    final: Tensor
    client: Tensor
    active: list[int]
    widths: list[int]
    has_final: list[bool]

    @property
    def num_steps(self) -> int:
        return len(self.active)


def build_schedule(*, seed: int, round_idx: int, sub_round: int, client_ids: Sequence[int],
                   sizes: Sequence[int], offsets: Sequence[int], local_epochs: int, batch_size: int,
                   device: torch.device, num_steps: Sequence[int] | None = None, stream: str = "train",
                   batch_repeats: int = 1) -> ChunkSchedule:
    """Lay out the batches of ``client_ids`` (sorted by decreasing ``tau_k``) for one round.

    Args:
        seed: Run seed.
        round_idx: The round ``t``.
        sub_round: Institution round in hierarchy mode (0 otherwise).
        client_ids: The chunk's clients, by decreasing number of samples.
        sizes: Their ``n_k``.
        offsets: Their first row in ``x_train``.
        local_epochs: ``E``.
        batch_size: ``B``.
        device: Where the tables live (the training device).
        num_steps: Each client's local steps when fewer than ``E ceil(n_k / B)`` (a straggler's
            partial work); ``None``: all of them. Final-epoch statistics then cover the steps of the
            last epoch a client reaches, complete or not.
        stream: The batch-order stream (:func:`~lightning_fl.engines.base.epoch_permutation`).
        batch_repeats: Steps per minibatch (pFedMe's ``K``): every ``(T, C, B)`` table of the minibatches
            is repeated ``K`` times along the step axis, and ``num_steps`` counts the repeated steps.
            Only a minibatch's first repeat is ``final`` (statistics count each minibatch once).
    """
    B, E, C, K = batch_size, local_epochs, len(client_ids), batch_repeats
    # numpy for the table arithmetic: these arrays are small and torch's per-op cost (a few us)
    # would dominate; the permutations themselves come from torch (epoch_permutation).
    n = np.asarray(sizes, dtype=np.int64)
    per_epoch = -(-n // B)
    taus = K * E * per_epoch if num_steps is None else np.asarray(num_steps, dtype=np.int64)
    if (taus[1:] > taus[:-1]).any():
        raise ValueError("clients must be ordered by decreasing number of local steps")
    T = int(taus[0])
    batches = -(-taus // K)  # minibatches each client draws (its last one may be repeated fewer times)
    epochs = -(-batches // per_epoch)  # epochs each client starts (the last one may be cut short)
    # Sample p of client j's epoch e goes to step e * spe_j + p // B, slot p % B (one scatter for all).
    orders = torch.cat([epoch_permutation(seed, round_idx, client, e, size, sub_round, stream)
                        for client, size, count in zip(client_ids, sizes, epochs.tolist()) for e in range(count)]).numpy()
    block_len = np.repeat(n, epochs)  # block (j, e) holds n_j samples
    block_client = np.repeat(np.arange(C), epochs)
    block_epoch = np.arange(len(block_len)) - np.repeat(np.cumsum(epochs) - epochs, epochs)
    block_of = np.repeat(np.arange(len(block_len)), block_len)
    position = np.arange(len(orders)) - np.repeat(np.cumsum(block_len) - block_len, block_len)
    client_of = block_client[block_of]
    step_of = block_epoch[block_of] * per_epoch[client_of] + position // B
    taken = step_of < batches[client_of]  # samples of minibatches a partial client never draws are not scheduled
    orders, client_of, step_of, position = orders[taken], client_of[taken], step_of[taken], position[taken]
    index = np.empty((int(batches[0]), C, B), dtype=np.int64)
    index[:] = np.asarray(offsets, dtype=np.int64).reshape(1, C, 1)  # padding: the client's first sample
    index[step_of, client_of, position % B] = orders + np.asarray(offsets, dtype=np.int64)[client_of]
    if K > 1:  # minibatch m is the batch of steps m K .. m K + K - 1
        index = np.repeat(index, K, axis=0)[:T]
    # Weights on the (step, client, slot) grid: slot b of step s holds sample (m mod spe) * B + b of
    # the client's epoch (m = s // K, its minibatch); it is real if that is < n_k and the client
    # still trains at step s.
    step = np.arange(T).reshape(T, 1, 1)
    minibatch = step // K
    start = (minibatch % per_epoch.reshape(1, C, 1)) * B
    real = (start + np.arange(B).reshape(1, 1, B) < n.reshape(1, C, 1)) & (step < taus.reshape(1, C, 1))
    weight = (real / np.clip(n.reshape(1, C, 1) - start, 1, B)).astype(np.float32)
    last_epoch_start = (batches - 1) // per_epoch * per_epoch
    final = real & (minibatch >= last_epoch_start.reshape(1, C, 1))
    final = (final & (step % K == 0)).astype(np.float32) if K > 1 else final.astype(np.float32)
    live = np.broadcast_to((step < taus.reshape(1, C, 1)), (T, C, B))  # the prefix still training
    active = live[:, :, 0].sum(1)
    has_final = (final.reshape(T, -1).any(1)).tolist()
    client = np.broadcast_to(np.arange(C).reshape(1, C, 1), (T, C, B))
    packed = [torch.from_numpy(np.ascontiguousarray(a[live])).to(device) for a in (index, weight, final, client)]
    return ChunkSchedule(*packed, active.tolist(), (active * B).tolist(), has_final)
