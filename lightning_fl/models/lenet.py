"""LeNet-5 client model (Tempo's model for MNIST and Fashion-MNIST)."""

from __future__ import annotations

from torch import Tensor, nn
from typing_extensions import override

from lightning_fl.faults.validation import check_choice, check_positive
from lightning_fl.models.base import ClientModule


class LeNet5(ClientModule):
    """LeNet-5 (LeCun et al. 1998) with ReLU and max pooling, as commonly used in FL papers (Tempo).

    conv 5x5x6 -> ReLU -> 2x2 max-pool -> conv 5x5x16 -> ReLU -> 2x2 max-pool -> dense 120 -> ReLU ->
    dense 84 -> ReLU -> dense ``num_classes``. For 28x28 inputs the first convolution pads by 2, so the
    feature maps are 28 -> 14 -> 10 -> 5 exactly as for the original 32x32 inputs (400 features).
    61,706 parameters for 1x28x28 inputs and 10 classes.

    Args:
        num_classes: Number of classes.
        in_channels: Input channels (1 for MNIST/Fashion-MNIST, 3 for CIFAR-10).
        image_size: 28 (padding 2) or 32 (no padding).

    Example:
        >>> sum(p.numel() for p in LeNet5().parameters())
        61706
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1, image_size: int = 28) -> None:
        check_positive("num_classes", num_classes, integer=True)
        check_positive("in_channels", in_channels, integer=True)
        check_choice("image_size", image_size, (28, 32))
        super().__init__(num_classes, (in_channels, image_size, image_size))
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 6, 5, padding=2 if image_size == 28 else 0), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, num_classes),
        )

    @override
    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))
