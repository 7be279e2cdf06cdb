"""DatasetDataModule(lazy=True): index arrays at set-up, bitwise the eager federation, a round reads its cohort only."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import yaml
from torch.utils.data import Dataset, TensorDataset

from lightning_fl.callbacks import FedAvg
from lightning_fl.datamodules import DatasetDataModule, GaussianClassesDataset
from lightning_fl.datamodules.lazy_dataset import LazyDatasetData, read_labels
from lightning_fl.datamodules.partitions import IID, Dirichlet
from lightning_fl.faults.validation import ConfigError
from lightning_fl.models import LogisticRegression
from lightning_fl.personalization import EvalProtocol
from lightning_fl.simulation.loop import FederatedLoop
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[2]
N, K, M, FEATURES, CLASSES = 8, 3, 4, 5, 3


class CountingDataset(Dataset):
    """Gaussian classes whose ``__getitem__`` records every index it is asked for."""

    def __init__(self, num_samples: int = 240, seed: int = 0) -> None:
        self.inner = GaussianClassesDataset(num_samples, FEATURES, CLASSES, seed=seed)
        self.reads: list[int] = []

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int):  # type: ignore[no-untyped-def]
        self.reads.append(index)
        return self.inner[index]


class LabelledDataset(CountingDataset):
    """The same samples, with a ``labels()`` method (label ``i mod C``), so set-up reads no item for them."""

    def labels(self) -> list[int]:
        return [i % CLASSES for i in range(len(self))]


class NumpyDataset(Dataset):
    """Items as ``(float64 array, Python int)``: the staged dtypes must be those the eager path stacks."""

    def __init__(self, num_samples: int = 150) -> None:
        self.x = np.random.default_rng(1).normal(size=(num_samples, FEATURES))
        self.targets = np.arange(num_samples) % CLASSES  # read instead of a pass of __getitem__

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int):  # type: ignore[no-untyped-def]
        return self.x[index], int(self.targets[index])


def _module(dataset: Dataset, lazy: bool, test_dataset: Dataset | None = None, **kwargs) -> DatasetDataModule:
    kwargs = {"partition": Dirichlet(alpha=0.5), "num_clients": N, "seed": 4, **kwargs}
    dm = DatasetDataModule(dataset, test_dataset=test_dataset, lazy=lazy, **kwargs)
    dm.setup()
    return dm


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    return (a is None and b is None) or (a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b))


@pytest.mark.parametrize(("make", "with_test", "val_fraction"), [
    (CountingDataset, False, 0.1), (CountingDataset, True, 0.25), (NumpyDataset, False, 0.0), (NumpyDataset, True, 0.1),
], ids=["split", "test_dataset", "numpy-no-val", "numpy-test_dataset"])
def test_staging_every_client_is_the_eager_federation_bitwise(make, with_test, val_fraction) -> None:
    test = (lambda: make(90)) if with_test else (lambda: None)
    eager = _module(make(), False, test(), val_fraction=val_fraction).data
    source = _module(make(), True, test(), val_fraction=val_fraction).data
    assert isinstance(source, LazyDatasetData) and source.has_validation == (val_fraction > 0)
    assert (source.num_clients, source.num_classes, source.input_shape) == (N, CLASSES, (FEATURES,))
    order = torch.tensor([5, 0, 7, 2, 1, 6, 3, 4])  # any order: row i is client order[i]
    for split in ("train", "val", "test") if val_fraction else ("train", "test"):
        assert torch.equal(source.sizes(split), eager.sizes(split))
        lazy, ref = source.stage(order, split), eager.stage(order, split)
        for name in ("x_train", "y_train", "train_offsets", "x_test", "y_test", "test_offsets", "x_val", "y_val",
                     "val_offsets"):
            assert _same(getattr(lazy, name), getattr(ref, name)), (split, name)
    assert eager.x_train.dtype == (torch.float64 if make is NumpyDataset else torch.float32)


def _fit(dm: DatasetDataModule, engine: str, rounds: int = 2, evaluate: bool = True) -> FederatedLoop:
    torch.manual_seed(0)
    loop = FederatedLoop(client=LogisticRegression(FEATURES, CLASSES),
                         optimizer=lambda p: torch.optim.SGD(p, lr=0.05), clients_per_round=K, local_epochs=1,
                         batch_size=10, seed=0, engine=engine, eval=EvalProtocol(client_subset=M))
    with tempfile.TemporaryDirectory(prefix="lfl-") as root:
        trainer = pl.Trainer(default_root_dir=root, max_epochs=rounds, accelerator="cpu", logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                             num_sanity_val_steps=0, limit_val_batches=1 if evaluate else 0,
                             check_val_every_n_epoch=1, callbacks=[FedAvg()])
        trainer.fit(loop, datamodule=dm)
    return loop


@pytest.mark.parametrize("engine", ["sequential", "vectorized"])
def test_a_fedavg_run_gives_bitwise_the_eager_weights(engine: str) -> None:
    eager = _fit(DatasetDataModule(CountingDataset(), partition=Dirichlet(alpha=0.5), num_clients=N), engine)
    lazy = _fit(DatasetDataModule(CountingDataset(), partition=Dirichlet(alpha=0.5), num_clients=N, lazy=True),
                engine)
    assert lazy.source is not None and eager.source is None and lazy.engine.name == engine
    assert torch.equal(lazy.layout.flatten(lazy.model.state_dict()), eager.layout.flatten(eager.model.state_dict()))
    assert torch.equal(lazy.last_evaluation.correct, eager.last_evaluation.correct)
    assert int((lazy.last_evaluation.total > 0).sum()) == M


def test_set_up_reads_labels_once_and_a_round_reads_its_cohort_only() -> None:
    passed = CountingDataset()
    _module(passed, True, partition=IID())
    assert passed.reads == [*range(240), 0]  # the label pass, then dataset[0] for the input's shape and dtype
    labelled = LabelledDataset()
    dm = _module(labelled, True, partition=IID())
    assert labelled.reads == [0]  # labels() answers the labels: no item but the first is read
    source, calls = dm.data, []
    stage = source.stage

    def recorded(ids, split="train", device=None):  # type: ignore[no-untyped-def]
        start = len(labelled.reads)
        staged = stage(ids, split, device)
        calls.append((torch.as_tensor(ids).tolist(), split, labelled.reads[start:]))
        return staged

    source.stage = recorded
    labelled.reads.clear()
    _fit(dm, "vectorized", rounds=1, evaluate=False)
    assert sum(len(reads) for *_, reads in calls) == len(labelled.reads)  # every read is inside a stage call
    # Set-up's probe of client 0, the round's cohort, then the closing report's evaluation subset (val, test).
    assert [(len(ids), split) for ids, split, _ in calls] == [(1, "val"), (K, "train"), (M, "val"), (M, "test")]
    for ids, split, reads in calls:  # each call reads its clients' samples, each once, and nothing else
        wanted = ("train",) if split == "train" else ("train", split)
        assert sorted(reads) == sorted(torch.cat([source.client_indices(k)[s] for k in ids for s in wanted]).tolist())
    assert len(calls[1][2]) == int(source.sizes("train")[calls[1][0]].sum()) < 240 // 2


def test_the_example_dataset_gives_its_labels_without_reading_a_sample() -> None:
    dataset = GaussianClassesDataset(num_samples=7, num_features=2, num_classes=3)
    assert dataset.labels().tolist() == [0, 1, 2, 0, 1, 2, 0]  # i mod 3, by hand
    assert [int(dataset[i][1]) for i in range(7)] == dataset.labels().tolist()


def test_stage_reads_exactly_the_asked_clients_samples() -> None:
    labelled = LabelledDataset()
    source = _module(labelled, True).data
    labelled.reads.clear()
    staged = source.stage(torch.tensor([6, 2]), "test")
    by_hand = [source.client_indices(k)[s] for s in ("train", "test") for k in (6, 2)]
    assert labelled.reads == torch.cat(by_hand).tolist()
    assert staged.train_sizes().tolist() == [len(by_hand[0]), len(by_hand[1])]


def test_labels_and_targets_are_checked() -> None:
    class BadLabels(LabelledDataset):
        def labels(self) -> list[int]:
            return [0, 1]

    with pytest.raises(ConfigError, match=r"^data.dataset.labels\(\) must be 240 integer labels, one per sample"):
        read_labels(BadLabels())
    floats = TensorDataset(torch.randn(4, 2), torch.zeros(4))
    floats.targets = torch.zeros(4)
    with pytest.raises(ConfigError, match=r"^data.dataset.targets must be 4 integer labels"):
        read_labels(floats)


def test_labels_that_are_not_the_items_labels_are_one_line() -> None:
    class Shifted(LabelledDataset):  # like a torchvision target_transform that targets do not see
        def __getitem__(self, index: int):  # type: ignore[no-untyped-def]
            x, y = super().__getitem__(index)
            return x, (y + 1) % CLASSES if index == 7 else y

    dm = _module(Shifted(), True, partition=IID())  # dataset[0] agrees: set-up passes
    owner, split = next((k, s) for k in range(N) for s, index in dm.data.client_indices(k).items()
                        if 7 in index.tolist())
    with pytest.raises(ConfigError, match=r"^data.dataset\[7\] returned label 2 but its labels\(\)/targets say 1"):
        dm.data.stage([owner], split)

    class ShiftedAll(LabelledDataset):
        def labels(self) -> list[int]:
            return [(i + 1) % CLASSES for i in range(len(self))]

    with pytest.raises(ConfigError, match=r"^data.dataset\[0\] returned label 0 but its labels\(\)/targets say 1"):
        _module(ShiftedAll(), True)


def _off_by_one() -> IID:
    partition = IID()  # its draw replaced on the instance, like a user's buggy partition
    partition.split = lambda labels, num_clients, generator: [  # type: ignore[method-assign]
        torch.arange(len(labels) // 2), torch.arange(len(labels) // 2, len(labels)) + 1]
    return partition


@pytest.mark.parametrize(("build", "line"), [
    (lambda: DatasetDataModule(LabelledDataset(10), partition=_off_by_one(), num_clients=2, test_fraction=0,
                               lazy=True),
     "partition gave client 1 index 10, outside the dataset's 10 samples [0, 10)"),
    (lambda: DatasetDataModule([("a", 0), ("b", 1)] * 4, num_clients=2, lazy=True),
     "data.dataset[0] returned (str, int): __getitem__ must return (x, y) of tensors or numbers"),
    (lambda: DatasetDataModule(TensorDataset(torch.randn(4, 2), torch.arange(4)),
                               test_dataset=[("a", 0)], num_clients=2, lazy=True),
     "data.test_dataset[0] returned (str, int)"),
    (lambda: DatasetDataModule(TensorDataset(torch.randn(4, 2), torch.arange(4)), num_clients=2, lazy="yes"),
     "data.lazy must be true or false; got 'yes'"),
])
def test_bad_input_is_one_line_before_training(build, line) -> None:
    with pytest.raises(ConfigError) as raised:
        build().setup()
    assert str(raised.value).startswith(line) and "\n" not in str(raised.value)


def test_a_non_tensor_item_behind_labels_is_caught_at_set_up() -> None:
    class Strings(LabelledDataset):
        def __getitem__(self, index: int):  # type: ignore[no-untyped-def]
            return "image", index % CLASSES

    with pytest.raises(ConfigError, match=r"^data.dataset\[0\] returned \(str, int\)"):
        _module(Strings(), True)


def test_a_client_without_training_samples_is_refused_as_the_eager_federation_refuses_it() -> None:
    items = [(torch.zeros(2), 0)] * 3
    with pytest.raises(ValueError, match="^client 1 has no training sample"):
        LazyDatasetData(items, [torch.tensor([0, 1]), torch.tensor([], dtype=torch.long)],
                        [torch.tensor([2]), torch.tensor([], dtype=torch.long)], num_classes=1)


def test_digest_follows_the_partition_not_the_contents() -> None:
    one, same = _module(CountingDataset(), True).data, _module(CountingDataset(seed=9), True).data
    other = _module(CountingDataset(), True, seed=5).data
    assert one.digest() == same.digest() != other.digest()


def test_the_shipped_lazy_config_trains(tmp_path: Path) -> None:
    config = yaml.safe_load((REPO / "configs" / "datasets" / "any_dataset_lazy.yaml").read_text())
    assert config["data"]["init_args"]["lazy"] is True
    config["trainer"].update(max_epochs=1, logger=False, enable_progress_bar=False, enable_checkpointing=False)
    config["trainer"]["callbacks"] = [c for c in config["trainer"]["callbacks"]
                                      if not c["class_path"].endswith("ModelCheckpoint")]
    config["data"]["init_args"]["dataset"]["init_args"]["num_samples"] = 200
    config["data"]["init_args"]["num_clients"] = 5
    config["model"].update(clients_per_round=2, eval={"client_subset": 3})
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    assert run_cli("fit", "--config", str(tmp_path / "run.yaml")) == 0
