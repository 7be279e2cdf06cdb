"""Per-round batch index tables for training several clients in lock step.

Every engine draws client ``k``'s local epoch ``e`` in the order
``epoch_permutation(seed, t, k, e, n_k)`` and cuts it into ``ceil(n_k / B)`` batches, the last one
possibly partial (SPEC section 1). For a chunk of clients trained together, this module lays those
batches out as one ``(T, C, B)`` table of rows into the federation's training tensors, with a
matching table of per-sample loss weights (``1 / |batch|`` for a real sample, ``0`` for padding), so a
local step of the whole chunk is one ``index_select`` and no per-client ``DataLoader`` exists.

Clients are ordered by decreasing ``tau_k``: at step ``s`` the clients still training are a prefix
of the chunk, whose length :attr:`ChunkSchedule.active` gives.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from lightning_fl.engines.base import epoch_permutation


@dataclass
class ChunkSchedule:
    """Batches of every local step of a chunk of ``C`` clients, ``T = max_k tau_k`` steps.

    Attributes:
        index: ``(T, C, B)`` long on the training device: rows of ``x_train`` (padding points at the
            client's first sample and carries zero weight).
        weight: ``(T, C, B)`` float32: ``1 / |batch|`` for real samples, ``0`` for padding, so the
            weighted sum of per-sample losses is each client's mean batch loss.
        final: ``(T, C, B)`` float32: 1 for real samples of each client's final local epoch (the
            samples ``train_acc`` and ``train_loss`` are computed over).
        active: Length ``T``: number of clients (a prefix of the chunk) that take step ``s``.
        has_final: Length ``T``: whether any client takes a step of its final epoch at step ``s``.
    """

    index: Tensor
    weight: Tensor
    final: Tensor
    active: list[int]
    has_final: list[bool]

    @property
    def num_steps(self) -> int:
        return len(self.active)


def build_schedule(*, seed: int, round_idx: int, sub_round: int, client_ids: Sequence[int],
                   sizes: Sequence[int], offsets: Sequence[int], local_epochs: int, batch_size: int,
                   device: torch.device) -> ChunkSchedule:
    """Lay out the batches of ``client_ids`` (sorted by decreasing ``n_k``) for one round.

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
    """
    B, E, C = batch_size, local_epochs, len(client_ids)
    per_epoch = [math.ceil(n / B) for n in sizes]
    taus = [E * s for s in per_epoch]
    if any(a < b for a, b in zip(taus, taus[1:])):
        raise ValueError("clients must be ordered by decreasing number of local steps")
    T = taus[0]
    index = torch.zeros(T, C, B, dtype=torch.long)
    weight = torch.zeros(T, C, B)
    final = torch.zeros(T, C, B)
    for j, (client, n, spe, offset) in enumerate(zip(client_ids, sizes, per_epoch, offsets)):
        pad = spe * B - n
        orders = torch.stack([epoch_permutation(seed, round_idx, client, e, n, sub_round) for e in range(E)])
        if pad:
            orders = torch.cat([orders, orders.new_zeros(E, pad)], dim=1)
        index[: E * spe, j] = orders.view(E * spe, B) + offset
        # Full batches weigh 1/B per sample; the last batch of each epoch 1/(its real size).
        w = torch.full((spe, B), 1.0 / B)
        if pad:
            last = n - (spe - 1) * B
            w[-1, :last] = 1.0 / last
            w[-1, last:] = 0.0
        weight[: E * spe, j] = w.repeat(E, 1)
        final[(E - 1) * spe : E * spe, j] = (w > 0).float()
    active = (torch.tensor(taus).unsqueeze(0) > torch.arange(T).unsqueeze(1)).sum(1).tolist()
    final_start = min(tau - spe for tau, spe in zip(taus, per_epoch))
    has_final = [s >= final_start for s in range(T)]
    return ChunkSchedule(index.to(device), weight.to(device), final.to(device), active, has_final)
