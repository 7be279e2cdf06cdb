"""The CIFAR-10 CNN of pfl-research's framework comparison (benchmark job J4)."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from typing_extensions import override

from lightning_fl.faults.validation import ConfigError, check_positive
from lightning_fl.models.base import ClientModule


class PflCNN(ClientModule):
    """pfl-research's ``simple_cnn``: two 3x3 convolutions, one max-pool, one dense hidden layer.

    conv 3x3x32 -> ReLU -> conv 3x3x64 -> ReLU -> 2x2 max-pool -> dropout 0.25 -> dense 128 -> ReLU ->
    dropout 0.5 -> dense ``num_classes`` (apple/pfl-research, ``publications/pfl/compare_utils``, the model
    of its CIFAR-10 comparison with FedML, Flower, FedScale, FLUTE and TFF). Without padding a 32x32
    image gives 32 -> 30 -> 28 -> 14, i.e. 12,544 features, and 1,626,442 parameters in total; nearly
    all of them (1,605,760) are in the first dense layer. Weights are Glorot-uniform initialised and
    biases keep PyTorch's default, as in pfl-research.

    Args:
        num_classes: Number of classes.
        in_channels: Input channels.
        image_size: Input height and width.
        dropout: Keep pfl-research's two dropout layers; ``False`` drops them (deterministic training,
            e.g. to compare the client engines weight for weight).

    Example:
        >>> sum(p.numel() for p in PflCNN().parameters())
        1626442
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 3, image_size: int = 32, dropout: bool = True) -> None:
        check_positive("num_classes", num_classes, integer=True)
        check_positive("in_channels", in_channels, integer=True)
        check_positive("image_size", image_size, integer=True)
        side = (image_size - 4) // 2
        if side < 1:
            raise ConfigError(f"image_size {image_size} is too small for two 3x3 convolutions and a 2x2 pooling")
        super().__init__(num_classes, (in_channels, image_size, image_size))
        drop = (lambda p: [nn.Dropout(p)]) if dropout else (lambda p: [])
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), *drop(0.25),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(64 * side * side, 128), nn.ReLU(), *drop(0.5), nn.Linear(128, num_classes),
        )
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                torch.nn.init.xavier_uniform_(module.weight)

    @override
    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))
