"""ResNet-18 with GroupNorm for 32x32 images (Tempo's CIFAR-10 model; GroupNorm as Hsieh et al. 2020)."""

from __future__ import annotations

from torch import Tensor, nn
from typing_extensions import override

from lightning_fl.faults.validation import ConfigError, check_positive
from lightning_fl.models.base import ClientModule


def _norm(channels: int, groups: int) -> nn.GroupNorm:
    return nn.GroupNorm(groups, channels)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with GroupNorm and an identity (or 1x1 projection) shortcut."""

    def __init__(self, in_planes: int, planes: int, stride: int, groups: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.norm1 = _norm(planes, groups)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.norm2 = _norm(planes, groups)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                                          _norm(planes, groups))
        self.relu = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet18GN(ClientModule):
    """ResNet-18 for CIFAR (3x3 stem, no max-pool; stages 64-128-256-512 x 2 blocks) with GroupNorm.

    BatchNorm's running statistics do not average well across non-IID clients; GroupNorm has no
    running statistics (no buffers), so the whole model is its parameters. 11,173,962 parameters for
    10 classes (the same count as the BatchNorm version, whose statistics are buffers).

    Args:
        num_classes: Number of classes.
        in_channels: Input channels.
        image_size: Input height and width (the stem keeps it; global average pooling at the end).
        groups: GroupNorm groups per layer (2, as Hsieh et al.); must divide 64.

    Example:
        >>> sum(p.numel() for p in ResNet18GN().parameters())
        11173962
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 3, image_size: int = 32, groups: int = 2) -> None:
        check_positive("num_classes", num_classes, integer=True)
        check_positive("in_channels", in_channels, integer=True)
        check_positive("image_size", image_size, integer=True)
        check_positive("groups", groups, integer=True)
        if 64 % groups:
            raise ConfigError(f"groups must divide 64 (the narrowest layer); got {groups}")
        super().__init__(num_classes, (in_channels, image_size, image_size))
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 64, 3, padding=1, bias=False), _norm(64, groups), nn.ReLU())
        stages, in_planes = [], 64
        for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            stages.append(nn.Sequential(BasicBlock(in_planes, planes, stride, groups),
                                        BasicBlock(planes, planes, 1, groups)))
            in_planes = planes
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)

    @override
    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.pool(self.stages(self.stem(x))).flatten(1))
