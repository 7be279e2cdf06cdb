"""Federated datamodules and seeded partitions (docs/algorithms.md, Data).

* :class:`FederatedDataModule`: base class; builds :class:`FederatedData` once, hands the loop
  "round ticket" dataloaders, reports label histograms / EMD and a partition heat map.
* :class:`SyntheticDataModule`: FedProx Synthetic(alpha, beta) / Synthetic-IID (FedFa's four sets).
* :class:`PooledDataModule`: any pooled ``(x, y)`` split by a partition of
  :mod:`lightning_fl.datamodules.partitions` (``IID``, ``Dirichlet``, ``Shards``, ``Quantity``,
  ``PerClientDirichlet``, ``PowerLawClasses``);
  :class:`DigitsDataModule`: the same on scikit-learn's 8x8 digits.
* :class:`SyntheticRegressionDataModule`: linear regression, one true model per client (float targets).
* :class:`DatasetDataModule`: any map-style ``torch.utils.data.Dataset`` (by class path in YAML) split by a
  partition; :class:`GaussianClassesDataset` is a small one a configuration can name.
* :class:`MemmapDataModule`: a federation stored as ``.npy`` arrays with per-client offsets, read by
  memory map (written by :func:`lightning_fl.datamodules.memmap_files.write_federation`).

The partition classes are imported from :mod:`lightning_fl.datamodules.partitions` only (one class
path in YAML: ``lightning_fl.datamodules.partitions.Dirichlet``).
"""

from __future__ import annotations

if __name__ != "lightning_fl.datamodules":  # one import path per module (see pyproject.toml)
    raise ImportError(f"import this package as lightning_fl.datamodules, not {__name__}")

from lightning_fl.datamodules.assemble import build_from_pooled
from lightning_fl.datamodules.dataset import DatasetDataModule, stack_dataset
from lightning_fl.datamodules.dataset_examples import GaussianClassesDataset
from lightning_fl.datamodules.digits import DigitsDataModule
from lightning_fl.datamodules.memmap import MemmapDataModule
from lightning_fl.datamodules.pooled import PooledDataModule
from lightning_fl.datamodules.regression import SyntheticRegressionDataModule
from lightning_fl.datamodules.split import split_train_test
from lightning_fl.datamodules.synthetic import SyntheticDataModule, generate_synthetic
from lightning_fl.datamodules.synthetic_pooled import PooledSyntheticDataModule, generate_synthetic_pool
from lightning_fl.simulation.datamodule import FederatedDataModule
from lightning_fl.state.data import FederatedData

__all__ = [
    "DatasetDataModule",
    "DigitsDataModule",
    "FederatedData",
    "FederatedDataModule",
    "GaussianClassesDataset",
    "MemmapDataModule",
    "PooledDataModule",
    "PooledSyntheticDataModule",
    "SyntheticDataModule",
    "SyntheticRegressionDataModule",
    "build_from_pooled",
    "generate_synthetic",
    "generate_synthetic_pool",
    "split_train_test",
    "stack_dataset",
]

# Real data sets (docs/datasets.md): IDX (MNIST, Fashion-MNIST), CIFAR-10, LEAF JSON (FEMNIST a-j), Shakespeare.
from lightning_fl.datamodules.cifar10 import CIFAR10DataModule  # noqa: E402
from lightning_fl.datamodules.downloads import CorruptDataError, DataError, DataNotFoundError, DownloadError  # noqa: E402
from lightning_fl.datamodules.femnist import FEMNISTLettersDataModule  # noqa: E402
from lightning_fl.datamodules.leaf import LeafDataModule  # noqa: E402
from lightning_fl.datamodules.mnist import FashionMNISTDataModule, MNISTDataModule  # noqa: E402
from lightning_fl.datamodules.shakespeare import ShakespeareDataModule  # noqa: E402
from lightning_fl.datamodules.train_test_pool import TrainTestPoolDataModule  # noqa: E402

__all__ += [
    "CIFAR10DataModule",
    "CorruptDataError",
    "DataError",
    "DataNotFoundError",
    "DownloadError",
    "FEMNISTLettersDataModule",
    "FashionMNISTDataModule",
    "LeafDataModule",
    "MNISTDataModule",
    "ShakespeareDataModule",
    "TrainTestPoolDataModule",
]
