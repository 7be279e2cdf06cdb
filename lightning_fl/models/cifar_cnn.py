"""The CIFAR-10 CNN of DWFed (and of McMahan et al.'s CIFAR experiments)."""

from __future__ import annotations

from torch import Tensor, nn
from typing_extensions import override

from lightning_fl.faults.validation import ConfigError, check_positive
from lightning_fl.models.base import ClientModule
from lightning_fl.models.mlp import dense_stack


class CifarCNN(ClientModule):
    """Two 5x5 convolutions with 64 channels, then dense 384 and 192 (DWFed; the TensorFlow CIFAR-10 model).

    conv 5x5x64 -> ReLU -> 2x2 max-pool -> conv 5x5x64 -> ReLU -> 2x2 max-pool -> dense 384 -> ReLU ->
    dense 192 -> ReLU -> dense ``num_classes``. With the default ``padding=0`` a 32x32 image gives
    32 -> 28 -> 14 -> 10 -> 5, i.e. 1,600 features, and 797,962 parameters in total (McMahan et al.
    report "about 10^6" for their version, which uses 24x24 crops and 3x3 pooling); ``padding=2``
    keeps 32 -> 16 -> 8 (4,096 features). DWFed's text lists the dense layers as 768, 384 and 192:
    ``hidden: [768, 384, 192]`` gives that variant. No local response normalisation, no dropout.

    Args:
        num_classes: Number of classes.
        in_channels: Input channels.
        image_size: Input height and width.
        hidden: Widths of the dense hidden layers.
        padding: Padding of both convolutions.

    Example:
        >>> sum(p.numel() for p in CifarCNN().parameters())
        797962
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 3, image_size: int = 32,
                 hidden: tuple[int, ...] = (384, 192), padding: int = 0) -> None:
        check_positive("num_classes", num_classes, integer=True)
        check_positive("in_channels", in_channels, integer=True)
        check_positive("image_size", image_size, integer=True)
        if isinstance(padding, bool) or not isinstance(padding, int) or padding < 0:
            raise ConfigError(f"padding must be an integer >= 0; got {padding!r}")
        for width in hidden:
            check_positive("hidden", width, integer=True)
        super().__init__(num_classes, (in_channels, image_size, image_size))
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 64, 5, padding=padding), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 64, 5, padding=padding), nn.ReLU(), nn.MaxPool2d(2),
        )
        side = image_size
        for _ in range(2):
            side = (side + 2 * padding - 4) // 2
        if side < 1:
            raise ConfigError(f"image_size {image_size} is too small for two 5x5 convolutions and poolings")
        self.classifier = nn.Sequential(nn.Flatten(), *dense_stack(64 * side * side, hidden, num_classes))

    @override
    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))
