"""LEAF JSON federations (datamodules/leaf.py), on small files written here."""

from __future__ import annotations

import json
import re

import pytest
import torch
from lightning_fl.datamodules import LeafDataModule
from lightning_fl.datamodules.downloads import CorruptDataError, DataNotFoundError
from lightning_fl.datamodules.leaf import LEAF_LETTERS, encode_text

from lightning_fl.faults.validation import ConfigError
from tests.conftest import run_cli


def leaf_file(users: dict[str, tuple[list, list]]) -> dict:
    return {"users": list(users), "num_samples": [len(y) for _, y in users.values()],
            "hierarchies": ["h"] * len(users),
            "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()}}


def femnist_like(n: int, label: int) -> tuple[list, list]:
    return [[float(label)] * 16 for _ in range(n)], [label] * n


@pytest.fixture
def leaf_dir(tmp_path):
    root = tmp_path / "femnist" / "data"
    (root / "train").mkdir(parents=True)
    (root / "test").mkdir()
    # 3 users in two train files; user "c" has no test samples
    train0 = leaf_file({"a": femnist_like(5, 0), "b": femnist_like(3, 1)})
    (root / "train" / "all_0.json").write_text(json.dumps(train0))
    (root / "train" / "all_1.json").write_text(json.dumps(leaf_file({"c": femnist_like(4, 2)})))
    (root / "test" / "all_0.json").write_text(json.dumps(leaf_file({"a": femnist_like(2, 0), "b": femnist_like(1, 1)})))
    return root


def test_natural_partition_loaded_as_is(leaf_dir):
    dm = LeafDataModule(data_dir=str(leaf_dir), input_shape=[1, 4, 4])
    dm.setup()
    assert dm.users == ["a", "b", "c"]
    assert dm.data.train_sizes().tolist() == [5, 3, 4] and dm.data.test_sizes().tolist() == [2, 1, 0]
    assert dm.input_shape == (1, 4, 4) and dm.num_classes == 3
    assert dm.label_histograms().tolist() == [[5, 0, 0], [0, 3, 0], [0, 0, 4]]
    assert float(dm.emd_to_population().min()) > 0


def test_without_test_folder_each_user_is_split(leaf_dir):
    dm = LeafDataModule(data_dir=str(leaf_dir), test_dir=None, test_fraction=0.4, num_classes=62)
    dm.setup()
    assert dm.data.train_sizes().tolist() == [3, 2, 2] and dm.data.test_sizes().tolist() == [2, 1, 2]
    assert dm.num_classes == 62 and dm.input_shape == (16,)


def test_min_samples_and_max_clients(leaf_dir):
    dm = LeafDataModule(data_dir=str(leaf_dir), min_samples=4)
    dm.setup()
    assert dm.users == ["a", "c"]
    dm = LeafDataModule(data_dir=str(leaf_dir), max_clients=2, seed=3)
    dm.setup()
    assert len(dm.users) == 2 and dm.users == sorted(dm.users)
    with pytest.raises(ConfigError, match="min_samples"):
        LeafDataModule(data_dir=str(leaf_dir), min_samples=99).setup()


def test_shakespeare_json_text_samples(tmp_path):
    root = tmp_path / "shakespeare" / "data"
    (root / "train").mkdir(parents=True)
    x = ["a" * 79 + "b", "To be, or not to be".ljust(80)]
    (root / "train" / "t.json").write_text(json.dumps(leaf_file({"HAMLET_HAMLET": (x, ["c", "!"])})))
    dm = LeafDataModule(data_dir=str(root), test_dir=None, test_fraction=0.0)
    dm.setup()
    assert dm.num_classes == 80 and dm.input_shape == (80,) and dm.data.x_train.dtype == torch.uint8
    assert dm.data.y_train.tolist() == [LEAF_LETTERS.index("c"), LEAF_LETTERS.index("!")]
    assert "".join(LEAF_LETTERS[i] for i in dm.data.x_train[1].tolist()) == x[1]
    assert encode_text("a_b").tolist() == [LEAF_LETTERS.index("a"), 1, LEAF_LETTERS.index("b")]


def test_corrupt_files_are_detected(leaf_dir):
    bad = leaf_dir / "train" / "all_1.json"
    text = bad.read_text()
    bad.write_text(text[: len(text) // 2])
    with pytest.raises(CorruptDataError, match=re.escape(str(bad)) + ": not valid JSON") as info:
        LeafDataModule(data_dir=str(leaf_dir)).setup()
    assert "\n" not in str(info.value)
    blob = json.loads(text)
    blob["num_samples"] = [5]
    bad.write_text(json.dumps(blob))
    with pytest.raises(CorruptDataError, match="user 'c' has 4 x and 4 y, num_samples says 5"):
        LeafDataModule(data_dir=str(leaf_dir)).setup()
    bad.write_text(json.dumps({"users": ["c"]}))
    with pytest.raises(CorruptDataError, match="needs keys users, num_samples, user_data"):
        LeafDataModule(data_dir=str(leaf_dir)).setup()
    bad.write_text(json.dumps(leaf_file({"a": femnist_like(1, 0)})))
    with pytest.raises(CorruptDataError, match="user 'a' also appears in"):
        LeafDataModule(data_dir=str(leaf_dir)).setup()


def test_sent140_raw_tweets_are_rejected(tmp_path):
    root = tmp_path / "sent140"
    (root / "train").mkdir(parents=True)
    tweet = ["1467810369", "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", "user", "hello world"]
    (root / "train" / "s.json").write_text(json.dumps(leaf_file({"user": ([tweet, tweet], [0, 1])})))
    with pytest.raises(ConfigError, match="word embedding"):
        LeafDataModule(data_dir=str(root), test_dir=None).setup()


def test_missing_folder_message(tmp_path):
    with pytest.raises(DataNotFoundError) as info:
        LeafDataModule(data_dir=str(tmp_path / "femnist")).setup()
    assert "\n" not in str(info.value)
    assert str(tmp_path / "femnist" / "train") in str(info.value) and "fetch it with" in str(info.value)


def test_fractional_labels_are_an_error_not_a_truncation(tmp_path):
    root = tmp_path / "femnist" / "data"
    (root / "train").mkdir(parents=True)
    x, _ = femnist_like(3, 0)
    (root / "train" / "t.json").write_text(json.dumps(leaf_file({"a": (x, [1.0, 0.7, 2.0])})))
    with pytest.raises(CorruptDataError, match=r"labels must be whole numbers \(class indices\); sample 1 has 0.7"):
        LeafDataModule(data_dir=str(root), test_dir=None, test_fraction=0.0).setup()
    (root / "train" / "t.json").write_text(json.dumps(leaf_file({"a": (x, [1.0, 0.0, 2.0])})))
    dm = LeafDataModule(data_dir=str(root), test_dir=None, test_fraction=0.0)
    dm.setup()  # whole numbers written as floats are class indices
    assert sorted(dm.data.y_train.tolist()) == [0, 1, 2]


def _ragged_between_users(root):
    (root / "train" / "all_1.json").write_text(json.dumps(leaf_file({"c": ([[1.0] * 15] * 4, [2] * 4)})))
    return "user 'c': train samples have shape (15,), but the train samples of user 'a' have (16,)"


def _ragged_within_a_user(root):
    (root / "train" / "all_1.json").write_text(json.dumps(leaf_file({"c": ([[1.0] * 16, [1.0] * 15], [2, 2])})))
    return "user 'c': inputs must be a rectangular array of numbers (every sample the same number of features); got" \
           " samples of [15, 16] features"


def _user_data_as_a_list(root):
    blob = leaf_file({"c": femnist_like(4, 2)})
    blob["user_data"] = list(blob["user_data"].values())
    (root / "train" / "all_1.json").write_text(json.dumps(blob))
    return "all_1.json: user_data must be an object mapping each user to its x and y; got a list"


def _test_features_differ(root):
    (root / "test" / "all_0.json").write_text(json.dumps(leaf_file({"a": ([[0.0] * 12] * 2, [0, 0])})))
    return "user 'a': test samples have shape (12,), but the train samples of user 'a' have (16,)"


@pytest.mark.parametrize("damage", [_ragged_between_users, _ragged_within_a_user, _user_data_as_a_list,
                                    _test_features_differ])
def test_malformed_features_are_one_line_errors(leaf_dir, damage):
    message = damage(leaf_dir)
    with pytest.raises(CorruptDataError) as info:
        LeafDataModule(data_dir=str(leaf_dir)).setup()
    assert message in str(info.value) and "\n" not in str(info.value)
    assert isinstance(info.value, ConfigError)  # the CLI prints it as one error: line, exit 2


def test_a_malformed_leaf_file_is_one_error_line_from_the_cli(leaf_dir, tiny, tmp_path, capsys):
    expected = _user_data_as_a_list(leaf_dir)
    data = {"class_path": "lightning_fl.datamodules.LeafDataModule", "init_args": {"data_dir": str(leaf_dir)}}
    assert run_cli("fit", "--config", str(tiny(data=data))) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].endswith(expected)
    assert err.strip().splitlines()[-1].startswith("error: ")
