"""Small map-style ``torch.utils.data.Dataset`` classes a configuration can name (docs/datasets.md, Your own Dataset).

``torch.utils.data.TensorDataset`` takes tensors, which YAML cannot write; :class:`GaussianClassesDataset`
takes plain numbers, so ``configs/datasets/any_dataset.yaml`` can build it by class path and hand it to
:class:`~lightning_fl.datamodules.DatasetDataModule` the way a user's own Dataset would be.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.data import Dataset

from lightning_fl.faults.validation import check_non_negative, check_positive
from lightning_fl.state.seeding import generator_for

__all__ = ["GaussianClassesDataset"]


class GaussianClassesDataset(Dataset):
    """``num_classes`` Gaussian clouds in ``num_features`` dimensions; sample ``i`` is a function of ``(seed, i)``.

    Class ``c`` has mean ``m_c ~ N(0, separation^2 I)`` (drawn once from ``(seed, "means")``); sample
    ``i`` has label ``i mod num_classes`` and input ``m_{y_i} + e_i`` with ``e_i ~ N(0, I)`` drawn from
    its own stream ``(seed, "sample", i)``. Reading one sample therefore never needs the others, as a
    data set too large for memory would be read, and :meth:`labels` gives every label without reading a
    sample, so ``DatasetDataModule(lazy=True)`` reads no item but the first at set-up.

    Args:
        num_samples: Number of samples.
        num_features: Input dimension.
        num_classes: Number of classes.
        separation: Standard deviation of the class means (larger: easier).
        seed: Seed of the means and of every sample.

    Raises:
        ConfigError: For a non-positive size or a negative ``separation`` (one line naming the field).

    Example:
        >>> ds = GaussianClassesDataset(num_samples=6, num_features=3, num_classes=2)
        >>> x, y = ds[5]
        >>> len(ds), tuple(x.shape), int(y), bool((ds[5][0] == x).all())
        (6, (3,), 1, True)
    """

    def __init__(self, num_samples: int = 1000, num_features: int = 20, num_classes: int = 4,
                 separation: float = 1.0, seed: int = 0) -> None:
        for name, value in (("num_samples", num_samples), ("num_features", num_features),
                            ("num_classes", num_classes)):
            check_positive(f"data.dataset.{name}", value, integer=True)
        check_non_negative("data.dataset.separation", separation)
        self.num_samples, self.num_features, self.num_classes = num_samples, num_features, num_classes
        self.seed, self.separation = seed, float(separation)
        self.means = float(separation) * torch.randn(num_classes, num_features,
                                                     generator=generator_for(seed, "means"))

    def __repr__(self) -> str:
        # A value repr: a checkpoint records the data's arguments through it, so a resume with other ones is named.
        return (f"GaussianClassesDataset(num_samples={self.num_samples}, num_features={self.num_features},"
                f" num_classes={self.num_classes}, separation={self.separation}, seed={self.seed})")

    def __len__(self) -> int:
        return self.num_samples

    def labels(self) -> Tensor:
        """Every sample's label, ``i mod num_classes``, without drawing any input (a lazy federation reads these)."""
        return torch.arange(self.num_samples) % self.num_classes

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        if not 0 <= index < self.num_samples:
            raise IndexError(f"index {index} is outside [0, {self.num_samples})")
        label = index % self.num_classes
        noise = torch.randn(self.num_features, generator=generator_for(self.seed, "sample", index))
        return self.means[label] + noise, torch.tensor(label)
