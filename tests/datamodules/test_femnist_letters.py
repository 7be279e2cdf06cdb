"""FEMNISTLettersDataModule: FedFa's FEMNIST (letters a-j, five classes per device) from tiny LEAF JSON files."""

from __future__ import annotations

import json

import pytest
import torch
from lightning_fl.datamodules import FEMNISTLettersDataModule
from lightning_fl.datamodules.partitions import PowerLawClasses


def leaf_file(users: dict[str, list[int]]) -> dict:
    """Users with the given labels; a sample's x is [label, 1000 * file-local user index + position, 0, 0]."""
    return {"users": list(users), "num_samples": [len(y) for y in users.values()],
            "user_data": {u: {"x": [[float(label), 1000.0 * k + i, 0.0, 0.0] for i, label in enumerate(y)], "y": y}
                          for k, (u, y) in enumerate(users.items())}}


@pytest.fixture
def femnist_dir(tmp_path):
    # Labels 36..45 are a-j; 3 (a digit), 12 (upper case), 46 ('k') and 61 ('z') must be dropped.
    # a-j counts: train 5 each (3 + 2 over two files), test 1 each of a-e -> 55 samples.
    root = tmp_path / "femnist" / "data"
    (root / "train").mkdir(parents=True)
    (root / "test").mkdir()
    letters = list(range(36, 46))
    (root / "train" / "all_0.json").write_text(json.dumps(leaf_file({"w0": letters * 3 + [3, 12, 46]})))
    (root / "train" / "all_1.json").write_text(json.dumps(leaf_file({"w1": letters, "w2": letters + [61]})))
    (root / "test" / "all_0.json").write_text(json.dumps(leaf_file({"w0": list(range(36, 41)) + [3]})))
    return root


def test_pool_keeps_a_to_j_relabelled(femnist_dir):
    x, y = FEMNISTLettersDataModule(data_dir=str(femnist_dir)).load_pooled()
    assert len(y) == 55 and x.shape == (55, 4)
    assert torch.equal(y, x[:, 0].long() - 36)  # label 36 ('a') -> 0, ..., 45 ('j') -> 9
    assert torch.bincount(y).tolist() == [6] * 5 + [5] * 5
    train_only = FEMNISTLettersDataModule(data_dir=str(femnist_dir), test_dir=None, input_shape=[2, 2]).load_pooled()
    assert train_only[0].shape == (50, 2, 2) and torch.bincount(train_only[1]).tolist() == [5] * 10


def test_every_device_holds_five_consecutive_letters(femnist_dir):
    # 6 devices x 5 classes: device u holds u..u+4 mod 10, so letter c has the holders u <= 5 with
    # c - u mod 10 < 5 (one for 'a', five for 'f', which has 5 images: min_per_class 1 fits).
    dm = FEMNISTLettersDataModule(data_dir=str(femnist_dir), num_clients=6, val_fraction=0.0,
                                  partition=PowerLawClasses(classes_per_client=5, min_per_class=1))
    dm.setup()
    data = dm.data
    for u in range(6):
        labels = torch.cat([data.client_train(u)[1], data.client_test(u)[1]])
        assert sorted(labels.unique().tolist()) == sorted((u + j) % 10 for j in range(5))
    assert dm.num_classes == 10 and dm.input_shape == (4,)
    assert int(data.train_sizes().sum() + data.test_sizes().sum()) == 55
    assert dm.label_histograms().shape == (6, 10) and dm.emd_to_population().shape == (6,)


def test_defaults_are_fedfas_setting():
    dm = FEMNISTLettersDataModule()
    assert dm.partition == PowerLawClasses(classes_per_client=5, min_per_class=2) and dm._num_clients == 200
    assert dm.test_fraction == 0.2


def test_no_letter_a_to_j_is_a_one_line_error(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "digits.json").write_text(json.dumps(leaf_file({"w": [0, 1, 2, 47]})))
    with pytest.raises(ValueError, match=r"^no sample labelled a-j \(FEMNIST labels 36..45\) in ") as err:
        FEMNISTLettersDataModule(data_dir=str(tmp_path), num_clients=2).setup()
    assert "\n" not in str(err.value)
