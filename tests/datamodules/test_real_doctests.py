"""The ``Example:`` blocks of the data modules, the partitions and the models stay correct."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "lightning_fl.datamodules.downloads", "lightning_fl.datamodules.idx", "lightning_fl.datamodules.train_test_pool",
    "lightning_fl.datamodules.leaf", "lightning_fl.datamodules.shakespeare",
    "lightning_fl.datamodules.partitions.iid", "lightning_fl.datamodules.partitions.dirichlet",
    "lightning_fl.datamodules.partitions.shards", "lightning_fl.datamodules.partitions.quantity",
    "lightning_fl.datamodules.partitions.per_client_dirichlet", "lightning_fl.datamodules.partitions.power_law_classes",
    "lightning_fl.datamodules.partitions.numpy_rng", "lightning_fl.datamodules.partitions.owners",
    "lightning_fl.datamodules.partitions.config_errors", "lightning_fl.datamodules.largest_remainder",
    "lightning_fl.datamodules.split", "lightning_fl.datamodules.assemble", "lightning_fl.datamodules.pooled",
    "lightning_fl.datamodules.digits", "lightning_fl.datamodules.synthetic_pfedme", "lightning_fl.datamodules.dataset",
    "lightning_fl.datamodules.dataset_examples",
    "lightning_fl.simulation.datamodule", "lightning_fl.reporting.tables",
    "lightning_fl.models.lenet", "lightning_fl.models.cifar_cnn", "lightning_fl.models.char_lstm",
    "lightning_fl.models.resnet_gn",
]  # datamodules/mnist.py and cifar10.py have no ``Example:`` block (test_real_idx.py, test_real_cifar10.py test them)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no doctest example: nothing was tested"
    assert result.failed == 0
