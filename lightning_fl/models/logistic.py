"""Multinomial logistic regression client model."""

from __future__ import annotations

from torch import Tensor, nn
from typing_extensions import override

from lightning_fl.faults.validation import check_positive
from lightning_fl.models.base import ClientModule


class LogisticRegression(ClientModule):
    """Multinomial logistic regression ``softmax(W x + b)`` (FedProx/FedFa synthetic and MNIST).

    Args:
        in_features: Input dimension (60 for Synthetic, 784 for MNIST-shaped inputs).
        num_classes: Number of classes.

    Example:
        >>> LogisticRegression(60, 10).linear.weight.shape
        torch.Size([10, 60])
    """

    def __init__(self, in_features: int = 60, num_classes: int = 10) -> None:
        check_positive("in_features", in_features, integer=True)
        check_positive("num_classes", num_classes, integer=True)
        super().__init__(num_classes, (in_features,))
        self.linear = nn.Linear(in_features, num_classes)

    @override
    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x.flatten(1))
