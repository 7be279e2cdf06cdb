"""A centralised SGD reference run beside a federated one (DWFed's model divergence, eq. 2).

DWFed (Frontiers 2022, section 3.1, eq. 2) measures how far the federated model ``w^f`` drifts from
``w^c``, the model that centralised SGD reaches on the pooled data from the same initialisation with
the same learning rate and number of steps: ``||w^f - w^c|| / ||w^c||``. :class:`CentralisedSGD` is
that reference. It trains a private copy of the client model on every client's training data pooled
together, a given number of steps at a time, so it can advance round by round beside the federation.

Batches are drawn without replacement from a permutation of the pooled samples that depends only on
``(seed, round)``, so a resumed run (which restores the reference weights) continues exactly.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor

from lightning_fl.models.base import ClientModule
from lightning_fl.state.flat_state import FlatStateLayout
from lightning_fl.state.seeding import generator_for


def pooled_batches(num_samples: int, batch_size: int, steps: int, *keys: int | str) -> list[Tensor]:
    """``steps`` index batches of ``batch_size`` (the last of a pass may be shorter) over ``num_samples``.

    Each pass over the data is a fresh permutation drawn from ``generator_for(*keys, pass)``, so the
    batches are a pure function of ``keys``.

    Example:
        >>> [len(b) for b in pooled_batches(5, 2, 4, 0)]
        [2, 2, 1, 2]
    """
    batches: list[Tensor] = []
    epoch = 0
    while len(batches) < steps:
        order = torch.randperm(num_samples, generator=generator_for(*keys, "pass", epoch))
        batches.extend(order[start : start + batch_size] for start in range(0, num_samples, batch_size))
        epoch += 1
    return batches[:steps]


class CentralisedSGD:
    """Plain SGD on the pooled training data, advanced a number of steps at a time.

    Args:
        model: The client model; a private copy is trained (the run's model is never touched).
        layout: The flat layout of the model's floating-point state (the federation's).
        x: Every client's training inputs, concatenated.
        y: Their labels.
        lr: Learning rate (the client optimizer's).
        batch_size: Samples per step.
        seed: Seed of the batch order.
    """

    def __init__(self, model: ClientModule, layout: FlatStateLayout, x: Tensor, y: Tensor, lr: float,
                 batch_size: int, seed: int) -> None:
        self.model = copy.deepcopy(model).train()
        self.layout = layout
        self.x, self.y = x, y
        self.lr, self.batch_size, self.seed = lr, batch_size, seed

    def advance(self, weights: Tensor, steps: int, round_idx: int) -> Tensor:
        """``steps`` SGD steps from the flat ``weights``; returns the new flat weights (fp32, same device)."""
        self.layout.load_into(weights, self.model.state_dict())  # the state_dict's tensors are the parameters
        params = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = torch.optim.SGD(params, lr=self.lr)
        for index in pooled_batches(len(self.y), self.batch_size, steps, self.seed, "centralised", round_idx):
            index = index.to(self.y.device)
            optimizer.zero_grad(set_to_none=True)
            self.model.loss(self.model(self.x[index]), self.y[index]).backward()
            optimizer.step()
        return self.layout.flatten(self.model.state_dict()).to(weights.device)
