"""DatasetDataModule: any map-style torch Dataset as a federation (docs/datasets.md, Your own Dataset)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from lightning_fl.datamodules import DatasetDataModule, GaussianClassesDataset, PooledDataModule, stack_dataset
from lightning_fl.datamodules.partitions import IID, Dirichlet, Shards
from torch.utils.data import Dataset, TensorDataset

from lightning_fl.faults.validation import ConfigError
from lightning_fl.state.init_args import describe
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[2]


class ListDataset(Dataset):
    """A map-style Dataset over a Python list of items (whatever they are)."""

    def __init__(self, items: list) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int):  # type: ignore[no-untyped-def]
        return self.items[index]


def _fields(dm):  # type: ignore[no-untyped-def]
    d = dm.data
    return (d.x_train, d.y_train, d.train_offsets, d.x_test, d.y_test, d.test_offsets, d.x_val, d.y_val,
            d.val_offsets)


@pytest.mark.parametrize("partition", [IID(), Dirichlet(alpha=0.5), Shards(classes_per_client=2)])
def test_bitwise_equal_to_pooled_on_the_same_tensors(partition):
    x, y = torch.randn(240, 7), torch.arange(240) % 5
    ours = DatasetDataModule(TensorDataset(x, y), partition=partition, num_clients=12, seed=3)
    pooled = PooledDataModule(x, y, partition=partition, num_clients=12, seed=3)
    ours.setup(), pooled.setup()
    for a, b in zip(_fields(ours), _fields(pooled), strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert ours.num_classes == pooled.num_classes == 5


def test_stack_dataset_by_hand():
    items = [(torch.tensor([1.0, 2.0]), 1), (np.array([3.0, 4.0], dtype=np.float32), np.int64(0)),
             (torch.tensor([5.0, 6.0]), torch.tensor([2]))]
    x, y = stack_dataset(ListDataset(items))
    assert torch.equal(x, torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
    assert y.dtype == torch.long and y.tolist() == [1, 0, 2]


def test_mapping_items_are_read_at_the_declared_keys():
    items = [{"image": torch.full((2,), float(i)), "label": i % 2, "id": "a"} for i in range(4)]
    x, y = stack_dataset(ListDataset(items), keys=["image", "label"])
    assert x[:, 0].tolist() == [0.0, 1.0, 2.0, 3.0] and y.tolist() == [0, 1, 0, 1]
    with pytest.raises(ConfigError, match=r"^data.dataset\[0\] returned a mapping with keys \['id', 'image', 'label'\]"):
        stack_dataset(ListDataset(items))


@pytest.mark.parametrize(("items", "message"), [
    ([], r"^data.dataset is empty \(len 0\)"),
    ([("a string", 0)], r"^data.dataset\[0\] returned \(str, int\): __getitem__ must return \(x, y\) of tensors"),
    ([(torch.ones(2), 0), (torch.ones(2), None)], r"^data.dataset\[1\] returned \(Tensor\(float32, \(2,\)\), NoneType\)"),
    ([torch.ones(3)], r"^data.dataset\[0\] returned Tensor\(float32, \(3,\)\): __getitem__ must return \(x, y\)"),
    ([(torch.ones(2), 0.5)], r"^data.dataset\[0\] returned label Tensor\(float32, \(\)\): labels must be integer"),
    ([(torch.ones(2), 0), (torch.ones(3), 1)], r"^data.dataset\[1\] returned an input of shape \(3,\); data.dataset\[0\]'s is \(2,\)"),
])
def test_bad_items_fail_with_one_line_naming_the_field(items, message):
    dm = DatasetDataModule(ListDataset(items), num_clients=1)
    with pytest.raises(ConfigError, match=message) as caught:
        dm.setup()
    assert "\n" not in str(caught.value)


def test_a_dataset_shorter_than_its_len_is_named():
    class Short(ListDataset):
        def __len__(self) -> int:
            return 3

    with pytest.raises(ConfigError, match=r"^data.dataset has len 3 but data.dataset\[2\] raised IndexError"):
        stack_dataset(Short([(torch.ones(1), 0)] * 2))


def _off_by(shift: int) -> IID:
    """An IID partition whose draw hands out one index too many (or a negative one), like a user's buggy partition.

    The draw is replaced on the instance: a Partition subclass defined here would be listed among the
    partitions every configuration error names, in every later test of the session.
    """
    partition = IID()
    partition.split = lambda labels, num_clients, generator: [  # type: ignore[method-assign]
        torch.arange(len(labels) // 2), torch.arange(len(labels) // 2, len(labels)) + shift]
    return partition


@pytest.mark.parametrize(("shift", "bad"), [(1, 10), (-6, -1)])
def test_partition_indices_outside_the_dataset_fail_before_anything_is_built(shift, bad):
    x, y = torch.randn(10, 2), torch.arange(10) % 2
    for dm in (DatasetDataModule(TensorDataset(x, y), partition=_off_by(shift), num_clients=2, test_fraction=0),
               PooledDataModule(x, y, partition=_off_by(shift), num_clients=2, test_fraction=0),
               DatasetDataModule(TensorDataset(x, y), test_dataset=TensorDataset(x, y), partition=_off_by(shift),
                                 num_clients=2)):
        with pytest.raises(ConfigError, match=rf"^partition gave client 1 index {bad}, outside the dataset's 10 samples"):
            dm.setup()


def test_official_test_dataset_is_dealt_by_label_and_training_is_the_whole_dataset():
    x, y = torch.randn(60, 3), torch.arange(60) % 3
    x_te, y_te = torch.randn(30, 3), torch.arange(30) % 3
    dm = DatasetDataModule(TensorDataset(x, y), test_dataset=TensorDataset(x_te, y_te),
                           partition=Shards(classes_per_client=1), num_clients=6, val_fraction=0)
    dm.setup()
    d = dm.data
    # Training holds every sample of the dataset once (no test fraction taken from it) ...
    assert sorted(d.x_train[:, 0].tolist()) == sorted(x[:, 0].tolist())
    # ... and every test sample goes to exactly one client, of a class that client trains on.
    assert sorted(d.x_test[:, 0].tolist()) == sorted(x_te[:, 0].tolist())
    for k in range(6):
        train_labels = set(d.y_train[d.train_offsets[k]:d.train_offsets[k + 1]].tolist())
        test_labels = set(d.y_test[d.test_offsets[k]:d.test_offsets[k + 1]].tolist())
        assert len(train_labels) == 1 and test_labels <= train_labels
    # 6 clients on 3 classes, 10 test samples per class: two clients of a class share its 10 by their 10 samples each.
    assert d.test_sizes().tolist() == [5] * 6


def test_test_dataset_labels_outside_the_classes_are_named():
    x, y = torch.randn(20, 2), torch.arange(20) % 2
    dm = DatasetDataModule(TensorDataset(x, y), test_dataset=TensorDataset(torch.randn(4, 2), torch.tensor([0, 1, 2, 0])),
                           num_clients=2)
    with pytest.raises(ConfigError, match=r"^data.test_dataset labels must lie in \[0, 2\) \(num_classes\); got 0..2"):
        dm.setup()


def test_gaussian_classes_dataset_samples_depend_on_seed_and_index_only():
    small, large = GaussianClassesDataset(10, 4, 3, seed=5), GaussianClassesDataset(50, 4, 3, seed=5)
    assert all(torch.equal(small[i][0], large[i][0]) for i in range(10))
    assert [int(large[i][1]) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert not torch.equal(GaussianClassesDataset(10, 4, 3, seed=6)[0][0], small[0][0])
    # separation 0: every class is N(0, I); the mean of 4000 draws is within 5 standard errors of 0.
    x, _ = stack_dataset(GaussianClassesDataset(4000, 2, 2, separation=0.0))
    assert x.mean(0).abs().max() < 5 / 4000**0.5
    with pytest.raises(ConfigError, match=r"^data.dataset.num_classes must be an integer >= 1; got 0"):
        GaussianClassesDataset(num_classes=0)
    with pytest.raises(IndexError):
        small[10]


def test_shipped_config_builds_the_dataset_from_yaml_and_trains(tmp_path):
    config = yaml.safe_load((REPO / "configs" / "datasets" / "any_dataset.yaml").read_text())
    config["trainer"].update(max_epochs=1, logger=False, enable_progress_bar=False, enable_checkpointing=False)
    config["trainer"]["callbacks"] = [c for c in config["trainer"]["callbacks"]  # no checkpoints in this check
                                      if not c["class_path"].endswith("ModelCheckpoint")]
    config["data"]["init_args"]["dataset"]["init_args"]["num_samples"] = 200
    config["data"]["init_args"]["num_clients"] = 5
    config["model"]["clients_per_round"] = 2
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    assert run_cli("fit", "--config", str(tmp_path / "run.yaml")) == 0


@pytest.mark.parametrize(("override", "line"), [
    (["--data.init_args.dataset.class_path", "nope.Nope"],
     "error: data.dataset: class_path nope.Nope cannot be used: No module named 'nope'"),
    (["--data.init_args.dataset.class_path", "torch.nn.Linear"],
     "error: data.dataset: Import path torch.nn.Linear does not correspond to a subclass of Dataset"),
    (["--data.init_args.dataset.init_args.num_samples", "0"],
     "error: data.dataset.num_samples must be an integer >= 1; got 0"),
])
def test_a_bad_dataset_in_the_config_is_one_line_before_training(override, line, capsys):
    code = run_cli("fit", "--config", str(REPO / "configs" / "datasets" / "any_dataset.yaml"), *override)
    printed = capsys.readouterr()
    assert code != 0
    errors = [row for row in (printed.out + printed.err).splitlines() if row.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(line), printed.err[-2000:]
    assert "Does not validate" not in printed.err  # not jsonargparse's multi-line report


def test_a_checkpoint_records_the_example_dataset_by_its_arguments():
    recorded = describe(DatasetDataModule(GaussianClassesDataset(num_samples=30, seed=2), num_clients=3))
    assert recorded["dataset"] == ("GaussianClassesDataset: GaussianClassesDataset(num_samples=30, num_features=20,"
                                   " num_classes=4, separation=1.0, seed=2)")
    assert describe(DatasetDataModule(GaussianClassesDataset(num_samples=31, seed=2), num_clients=3)) != recorded
