"""The federation of benchmark job J4 (pfl-research's CIFAR-10 workload): 1,000 users x 50 images.

pfl-research's framework comparison (apple/pfl-research ``publications/pfl/``) deals the 50,000
CIFAR-10 training images IID to 1,000 users, 50 each. :func:`cifar_like` does the same with the
real images when ``cifar-10-python.tar.gz`` (or the extracted folder) is in ``data_dir``, and
otherwise builds CIFAR-shaped synthetic images (``3 x 32 x 32``, 10 classes) that a CNN can learn,
so that accuracies (fp32 against ``16-mixed`` and ``bf16-mixed``) mean something: each class is a
smooth random colour pattern on a ``40 x 40`` canvas; an image is a random ``32 x 32`` crop of its
class's pattern plus 0.7 times the same crop of another class's pattern plus unit Gaussian noise.
Test images (10 per user, the 10,000 of CIFAR-10's test set) go to the users' test splits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from typing_extensions import override

from lightning_fl.datamodules.cifar10 import CIFAR10DataModule, load_cifar10
from lightning_fl.datamodules.downloads import DataNotFoundError
from lightning_fl.simulation.datamodule import FederatedDataModule
from lightning_fl.state.data import FederatedData, offsets_from_sizes

NUM_CLASSES = 10
#: Synthetic images: side of the class patterns' canvas, weight of the distracting class, noise std.
CANVAS, DISTRACTOR, NOISE = 40, 0.7, 1.0


def synthetic_cifar(num_samples: int, seed: int) -> tuple[Tensor, Tensor]:
    """``num_samples`` synthetic CIFAR-shaped images ``(n, 3, 32, 32)`` float32 and labels (module docstring).

    The class patterns are the same for every ``seed`` (train and test share them); crops, labels,
    distractors and noise come from ``seed``.
    """
    patterns = torch.randn(NUM_CLASSES, 3, 10, 10, generator=torch.Generator().manual_seed(1234))
    patterns = F.interpolate(patterns, size=(CANVAS, CANVAS), mode="bilinear", align_corners=False)
    patterns = (patterns - patterns.mean((1, 2, 3), keepdim=True)) / patterns.std((1, 2, 3), keepdim=True)
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, NUM_CLASSES, (num_samples,), generator=gen)
    other = (y + torch.randint(1, NUM_CLASSES, (num_samples,), generator=gen)) % NUM_CLASSES
    top = torch.randint(0, CANVAS - 31, (num_samples,), generator=gen)
    left = torch.randint(0, CANVAS - 31, (num_samples,), generator=gen)
    side = torch.arange(32)
    rows, cols = (top[:, None] + side)[:, None, :, None], (left[:, None] + side)[:, None, None, :]
    channel = torch.arange(3)[None, :, None, None]
    x = patterns[y[:, None, None, None], channel, rows, cols]
    for start in range(0, num_samples, 4096):  # in chunks: the distractors of 50,000 images would be 600 MB more
        part = slice(start, start + 4096)
        x[part] += DISTRACTOR * patterns[other[part, None, None, None], channel, rows[part], cols[part]]
    x += NOISE * torch.randn(x.shape, generator=gen)
    return x, y


def _real_cifar(data_dir: str) -> tuple[Tensor, Tensor, Tensor, Tensor] | None:
    try:
        x_train, y_train, x_test, y_test, _ = load_cifar10(data_dir)
    except DataNotFoundError:
        return None
    mean = torch.tensor(CIFAR10DataModule.MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR10DataModule.STD).view(1, 3, 1, 1)
    scale = lambda a: (torch.from_numpy(a).float() / 255 - mean) / std  # noqa: E731
    return scale(x_train), torch.from_numpy(y_train), scale(x_test), torch.from_numpy(y_test)


def cifar_like(num_users: int = 1000, per_user: int = 50, test_per_user: int = 10, seed: int = 0,
               data_dir: str = "data") -> tuple[FederatedData, str]:
    """J4's federation: ``(data, source)``, ``source`` ``"CIFAR-10"`` or ``"synthetic CIFAR-shaped"``.

    Args:
        num_users: Users (clients).
        per_user: Training images per user (IID).
        test_per_user: Test images per user.
        seed: Seed of the deal (and of the synthetic images).
        data_dir: Where CIFAR-10 is looked for (see :func:`~lightning_fl.datamodules.cifar10.load_cifar10`).
    """
    real = _real_cifar(data_dir)
    n_train, n_test = num_users * per_user, num_users * test_per_user
    if real is not None and n_train <= len(real[1]) and n_test <= len(real[3]):
        x_train, y_train, x_test, y_test = real
        gen = torch.Generator().manual_seed(seed)
        train, test = torch.randperm(len(y_train), generator=gen)[:n_train], torch.randperm(len(y_test), generator=gen)
        x_train, y_train, x_test, y_test = x_train[train], y_train[train], x_test[test[:n_test]], y_test[test[:n_test]]
        source = "CIFAR-10"
    else:
        x_train, y_train = synthetic_cifar(n_train, seed)
        x_test, y_test = synthetic_cifar(n_test, seed + 1)
        source = "synthetic CIFAR-shaped"
    data = FederatedData(x_train, y_train, offsets_from_sizes([per_user] * num_users), x_test, y_test,
                         offsets_from_sizes([test_per_user] * num_users), NUM_CLASSES)
    return data, source


class CifarLikeDataModule(FederatedDataModule):
    """:func:`cifar_like` as a datamodule (for the federated loop under a ``Trainer``); no validation split.

    Args:
        num_users: Users (clients).
        per_user: Training images per user.
        test_per_user: Test images per user.
        seed: Seed of the deal and the synthetic images.
        data_dir: Where CIFAR-10 is looked for.
    """

    def __init__(self, num_users: int = 1000, per_user: int = 50, test_per_user: int = 10, seed: int = 0,
                 data_dir: str = "data") -> None:
        super().__init__(seed=seed, val_fraction=0.0)
        self.num_users, self.per_user, self.test_per_user, self.data_dir = num_users, per_user, test_per_user, data_dir
        self.source: str | None = None

    @override
    def build_data(self) -> FederatedData:
        data, self.source = cifar_like(self.num_users, self.per_user, self.test_per_user, self.seed, self.data_dir)
        return data
