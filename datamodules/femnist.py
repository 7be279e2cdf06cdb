"""FedFa's FEMNIST: the lowercase letters a-j of a LEAF FEMNIST, five classes per device (docs/datasets.md).

FedFa (Information Sciences 2022, section 4.1) and q-FFL use FedProx's FEMNIST: "10 lowercase letters
('a'-'j') as subsamples from EMNIST", "only 5 classes to each device", 200 devices and 18,345
samples (FedFa Table 1), each device split 80/20. FEMNIST's labels are 0-9 digits, 10-35 upper case
and 36-61 lower case, so a-j are 36..45, relabelled 0..9. Our reading of FedProx's sampler
(``data/nist/data/my_sample.py``): device ``u`` holds the consecutive letters ``(u + j) mod 10``;
its size is ``lognormal(4, 1) + 5`` split evenly over its letters (at least 2 each); a reset of the
read position in that script makes most devices reuse the same first images of each letter.
:class:`FEMNISTLettersDataModule` keeps the class rule and draws sizes without reusing images: the
a-j images of every writer are pooled (the writers' own split is dropped, as FedProx did) and dealt
by :class:`~lightning_fl.datamodules.partitions.PowerLawClasses` (FedProx's MNIST rule: every
holder gets ``min_per_class`` images of each letter, the rest shared by lognormal weights).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from lightning_fl.datamodules.leaf import _to_inputs, _to_labels, read_leaf_dir
from lightning_fl.datamodules.partitions import Partition, PowerLawClasses
from lightning_fl.datamodules.pooled import PooledDataModule
from torch import Tensor
from typing_extensions import override

from lightning_fl.faults.validation import ConfigError, check_positive

__all__ = ["FEMNIST_A_TO_J", "FEMNISTLettersDataModule"]

#: FEMNIST's labels of the lowercase letters a-j (36 = 'a'); they become classes 0..9.
FEMNIST_A_TO_J = tuple(range(36, 46))


class FEMNISTLettersDataModule(PooledDataModule):
    """The letters a-j of LEAF FEMNIST JSON files, re-partitioned five classes per device (FedFa, q-FFL).

    Every ``*.json`` of ``<data_dir>/<train_dir>`` (and of ``<data_dir>/<test_dir>`` when present) is
    read with :func:`~lightning_fl.datamodules.leaf.read_leaf_dir`; the samples labelled 36..45 of all
    writers form the pool, relabelled 0..9, and the partition deals them to ``num_clients`` devices,
    each split ``1 - test_fraction`` / ``test_fraction`` at random (FedFa: 80/20).

    Args:
        data_dir: LEAF FEMNIST ``data`` directory (the one holding ``train/``).
        train_dir: Train sub-directory name.
        test_dir: Test sub-directory name, pooled too; ``null`` reads the train files only.
        input_shape: Reshape the 784 pixels to this per-sample shape (``[1, 28, 28]`` for CNNs);
            ``null`` keeps FedFa's flat 784-vector.
        partition: A :class:`~lightning_fl.datamodules.partitions.Partition`; ``None`` is
            ``PowerLawClasses(classes_per_client=5, min_per_class=2)`` (FedProx's at least 2 per letter).
        num_clients: Number of devices (FedFa: 200).
        seed: Seed of the partition and of the per-device splits.
        test_fraction: Fraction of each device's samples held out for testing, in ``[0, 1)``.
        val_fraction: Fraction of each device's training samples moved to its validation split, in
            ``[0, 1)``; ``0``: none (the papers' exact training sets).

    Raises:
        DataNotFoundError: At setup, when ``<data_dir>/<train_dir>`` has no JSON file.
        CorruptDataError: At setup, for invalid JSON or inconsistent counts (the message names the file).
        ConfigError: For an out-of-range option, or at setup when no sample is labelled a-j.

    Example (YAML)::

        data:
          class_path: lightning_fl.datamodules.FEMNISTLettersDataModule
          init_args: {data_dir: data/femnist/data, num_clients: 200}
    """

    def __init__(
        self,
        data_dir: str = "data/femnist/data",
        train_dir: str = "train",
        test_dir: str | None = "test",
        input_shape: list[int] | None = None,
        partition: Partition | None = None,
        num_clients: int = 200,
        seed: int = 0,
        test_fraction: float = 0.2,
        val_fraction: float = 0.1,
    ) -> None:
        if partition is None:
            partition = PowerLawClasses(classes_per_client=5, min_per_class=2)
        super().__init__(partition=partition, num_clients=num_clients, num_classes=len(FEMNIST_A_TO_J), seed=seed,
                         test_fraction=test_fraction, val_fraction=val_fraction)
        if input_shape is not None:
            for size in input_shape:
                check_positive("input_shape", size, integer=True)
        self.data_dir = data_dir
        self.train_dir = train_dir
        self.test_dir = test_dir
        self.leaf_input_shape = tuple(input_shape) if input_shape is not None else None

    @override
    def load_pooled(self) -> tuple[Tensor, Tensor]:
        root = Path(self.data_dir)
        folders = [root / self.train_dir]
        if self.test_dir and (root / self.test_dir).is_dir() and any((root / self.test_dir).glob("*.json")):
            folders.append(root / self.test_dir)
        xs, ys = [], []
        for folder in folders:
            for user, record in read_leaf_dir(folder).items():
                what = f"{folder} user {user!r}"
                y = _to_labels(record["y"], what)
                keep = np.flatnonzero(((y >= FEMNIST_A_TO_J[0]) & (y <= FEMNIST_A_TO_J[-1])).numpy())
                if len(keep):  # convert only the kept images: all of FEMNIST as float32 is 2.5 GB
                    xs.append(_to_inputs([record["x"][i] for i in keep], what))
                    ys.append(y[keep] - FEMNIST_A_TO_J[0])
        if not ys:
            raise ConfigError(f"no sample labelled a-j (FEMNIST labels 36..45) in {', '.join(map(str, folders))}"
                              " (data_dir); FEMNIST has 62 classes, lowercase letters at 36..61")
        x = torch.cat(xs)
        if self.leaf_input_shape is not None:
            try:
                x = x.reshape(len(x), *self.leaf_input_shape)
            except RuntimeError as err:
                raise ConfigError(f"input_shape {list(self.leaf_input_shape)} does not fit samples of"
                                  f" {tuple(x.shape[1:])}") from err
        return x, torch.cat(ys)
