"""The McMahan et al. 2-conv CNN client model for 28x28 images."""

from __future__ import annotations

from torch import Tensor, nn
from typing_extensions import override

from lightning_fl.faults.validation import check_positive
from lightning_fl.models.base import ClientModule


class CNN28(ClientModule):
    """The 2-conv CNN of McMahan et al. (2017) for 28x28 inputs.

    conv 5x5x32 -> ReLU -> 2x2 max-pool -> conv 5x5x64 -> ReLU -> 2x2 max-pool -> dense 512 -> ReLU ->
    dense ``num_classes``. ``padding=2`` keeps the 28 -> 14 -> 7 spatial sizes of the original.

    Args:
        num_classes: Number of classes.
        in_channels: Input channels (1 for MNIST/Fashion-MNIST).
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        check_positive("num_classes", num_classes, integer=True)
        super().__init__(num_classes, (in_channels, 28, 28))
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(64 * 7 * 7, 512), nn.ReLU(), nn.Linear(512, num_classes))

    @override
    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))
