"""Fully connected client model."""

from __future__ import annotations

from torch import Tensor, nn
from typing_extensions import override

from lightning_fl.faults.validation import check_positive
from lightning_fl.models.base import ClientModule


def dense_stack(in_features: int, hidden: tuple[int, ...] | list[int], num_classes: int,
                batch_norm: bool = False) -> list[nn.Module]:
    """``Linear -> ReLU`` (``Linear -> BatchNorm1d -> ReLU`` with ``batch_norm``) for every hidden width,
    then a ``Linear`` to ``num_classes`` logits."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_features, width), *([nn.BatchNorm1d(width)] if batch_norm else []), nn.ReLU()]
        in_features = width
    layers.append(nn.Linear(in_features, num_classes))
    return layers


class MLP(ClientModule):
    """Fully connected network with ReLU hidden layers.

    Args:
        in_features: Input dimension.
        num_classes: Number of classes.
        hidden: Width of each hidden layer.
        batch_norm: A ``BatchNorm1d`` after each hidden linear layer (FedBN's personal part); both
            engines train it (the vectorized one with the batched formulation, not the hand-written one).
    """

    def __init__(self, in_features: int = 60, num_classes: int = 10, hidden: tuple[int, ...] = (200, 200),
                 batch_norm: bool = False) -> None:
        check_positive("in_features", in_features, integer=True)
        for width in hidden:
            check_positive("hidden", width, integer=True)
        super().__init__(num_classes, (in_features,))
        self.net = nn.Sequential(*dense_stack(in_features, hidden, num_classes, batch_norm))

    @override
    def forward(self, x: Tensor) -> Tensor:
        return self.net(x.flatten(1))
