"""The clients' validation splits: sizes, disjointness, determinism, what fit logs, monitor errors."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lightning_fl.datamodules import PooledDataModule, SyntheticDataModule, build_from_pooled, generate_synthetic
from lightning_fl.faults.validation import ConfigError
from lightning_fl.models import LogisticRegression
from lightning_fl.simulation.datamodule import FederatedDataModule
from lightning_fl.state.data import FederatedData, offsets_from_sizes, split_validation, validation_size
from lightning_fl.state.seeding import generator_for
from tests.conftest import run_cli

TINY_DATA = {"variant": "1_1", "num_clients": 6, "max_samples_per_client": 80}


def _version_dir(tmp_path: Path, version: int = 0) -> Path:
    return tmp_path / "logs" / "run" / f"version_{version}"


def _events(version_dir: Path) -> EventAccumulator:
    acc = EventAccumulator(str(version_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def _indexed(sizes: list[int], test_sizes: list[int]) -> FederatedData:
    """Clients whose train rows hold their sample ids 0..n-1 and test rows ids 1000, 1001, ..."""
    n, m = sum(sizes), sum(test_sizes)
    return FederatedData(torch.arange(n, dtype=torch.float32).unsqueeze(1), torch.zeros(n, dtype=torch.long),
                         offsets_from_sizes(sizes), 1000 + torch.arange(m, dtype=torch.float32).unsqueeze(1),
                         torch.zeros(m, dtype=torch.long), offsets_from_sizes(test_sizes), num_classes=1)


def _ids(x: torch.Tensor, offsets: torch.Tensor, k: int) -> list[int]:
    return x[int(offsets[k]):int(offsets[k + 1]), 0].long().tolist()


# ----------------------------------------------------------------------------- sizes and sets
def test_validation_sizes_by_hand():
    assert validation_size(50, 0.1) == 5
    assert validation_size(3, 0.1) == 0  # round(0.3)
    assert validation_size(3, 0.9) == 2  # round(2.7) = 3, capped at n - 1: one training sample stays
    assert validation_size(1, 0.5) == 0
    assert validation_size(25, 0.1) == 2 and validation_size(35, 0.1) == 4  # 2.5 and 3.5: halves to even
    assert validation_size(0, 0.1) == 0


@pytest.mark.parametrize(("fraction", "val", "train"), [(0.1, [5, 0, 0], [45, 3, 1]), (0.9, [45, 2, 0], [5, 1, 1])])
def test_split_sizes_and_disjoint_index_sets(fraction, val, train):
    data = _indexed([50, 3, 1], [12, 1, 0])
    split = split_validation(data, fraction, seed=7)
    assert split.val_sizes().tolist() == val and split.train_sizes().tolist() == train
    assert torch.equal(split.x_test, data.x_test) and torch.equal(split.test_offsets, data.test_offsets)
    for k in range(3):
        tr = _ids(split.x_train, split.train_offsets, k)
        va = _ids(split.x_val, split.val_offsets, k)
        te = _ids(split.x_test, split.test_offsets, k)
        assert not set(tr) & set(va) and not set(tr) & set(te) and not set(va) & set(te)
        assert sorted(tr + va) == _ids(data.x_train, data.train_offsets, k)  # nothing lost, nothing added
        assert tr == sorted(tr) and va == sorted(va)  # original order kept


def test_split_is_a_function_of_seed_and_client_only():
    alone = split_validation(_indexed([40, 50], [1, 1]), 0.1, seed=3)
    more = split_validation(_indexed([40, 50, 7, 9], [1, 1, 1, 1]), 0.1, seed=3)
    assert torch.equal(alone.x_val, more.x_val[:9]) and alone.val_sizes().tolist() == [4, 5]
    # client 1's five validation samples: the first five of its own permutation (ids 40..89)
    perm = torch.randperm(50, generator=generator_for(3, "validation_split", 1))
    assert _ids(alone.x_val, alone.val_offsets, 1) == sorted((40 + perm[:5]).tolist())
    other_seed = split_validation(_indexed([40, 50], [1, 1]), 0.1, seed=4)
    assert not torch.equal(other_seed.x_val, alone.x_val)


def test_datamodule_val_fraction_zero_keeps_the_training_sets_bitwise():
    x, y = torch.arange(300, dtype=torch.float32).unsqueeze(1), torch.arange(300) % 3
    old = PooledDataModule(x, y, num_clients=5, seed=2, val_fraction=0)
    new = PooledDataModule(x, y, num_clients=5, seed=2)
    old.setup()
    new.setup()
    assert not old.data.has_validation and new.data.has_validation
    reference = old.build_data()  # the partition and train/test split, nothing else
    assert torch.equal(old.data.x_train, reference.x_train) and torch.equal(old.data.train_offsets,
                                                                             reference.train_offsets)
    assert torch.equal(new.data.x_test, old.data.x_test)  # the test splits are untouched
    # 300 samples, 5 IID clients of 60, 12 test, 48 train -> round(4.8) = 5 validation, 43 train
    assert new.data.val_sizes().tolist() == [5] * 5 and new.data.train_sizes().tolist() == [43] * 5
    assert new.partition_summary()["val_samples"] == 25


@pytest.mark.parametrize("value", [1.0, -0.1, "0.1", True])
def test_val_fraction_out_of_range_is_one_line(value):
    with pytest.raises(ConfigError, match=r"^val_fraction must be a number in \[0, 1\)"):
        SyntheticDataModule(val_fraction=value)


# ----------------------------------------------------------------------------- RoundsToTarget checks
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"monitor": "val/acc_mean", "target": 60},
     "RoundsToTarget.target must be between 0 and 1 for an accuracy monitor (val/acc_mean); got 60"),
    ({"monitor": "val/acc_worst20", "target": -0.5}, "must be between 0 and 1 for an accuracy monitor"),
    ({"monitor": "val/acc_mean", "target": math.nan}, "RoundsToTarget.target must be a finite number; got nan"),
    ({"monitor": "val/loss", "target": math.inf, "mode": "min"}, "RoundsToTarget.target must be a finite number"),
])
def test_rounds_to_target_rejects_percent_and_nan_targets(kwargs, message):
    from lightning_fl.callbacks import RoundsToTarget

    with pytest.raises(ConfigError) as err:
        RoundsToTarget(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_rounds_to_target_accepts_fractions_and_other_scales():
    from lightning_fl.callbacks import RoundsToTarget

    assert RoundsToTarget("val/acc_mean", 0.6).target == 0.6
    assert RoundsToTarget("val/loss", 60.0, mode="min").target == 60.0  # not an accuracy: any finite number


# ----------------------------------------------------------------------------- runs
def _acc(model: LogisticRegression, x: torch.Tensor, y: torch.Tensor, offsets: torch.Tensor) -> float:
    """Mean over clients (with samples) of the client accuracy, computed here from scratch."""
    with torch.no_grad():
        hits = (model(x).argmax(1) == y).double()
    accs = [float(hits[lo:hi].mean()) for lo, hi in zip(offsets[:-1].tolist(), offsets[1:].tolist()) if hi > lo]
    return sum(accs) / len(accs)


def test_fit_logs_val_and_test_at_every_evaluation_and_the_final_round(tiny, tmp_path):
    assert run_cli("fit", "--config", str(tiny(**{"trainer.max_epochs": 5}))) == 0  # evaluations every 2 rounds
    run = _version_dir(tmp_path)
    events = _events(run)
    for name in ("val/acc_mean", "val/loss", "test/acc_mean", "test/acc_worst20", "test/loss"):
        assert [e.step for e in events.Scalars(name)] == [2, 4, 5], name
    with open(run / "fairness_history.csv") as f:
        rows = [(row["stage"], int(row["round"])) for row in csv.DictReader(f)]
    assert rows == [("val", 2), ("test", 2), ("val", 4), ("test", 4), ("val", 5), ("test", 5)]
    summary = (run / "fairness_summary.md").read_text()
    assert summary.startswith("Global model after 5 rounds (client test splits).")
    # The logged numbers are the final model's accuracies on the validation and the test splits.
    state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    model = LogisticRegression(in_features=60, num_classes=10)
    model.load_state_dict({k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")})
    dm = SyntheticDataModule(**TINY_DATA)
    dm.setup()
    d = dm.data
    assert events.Scalars("val/acc_mean")[-1].value == pytest.approx(_acc(model, d.x_val, d.y_val, d.val_offsets))
    assert events.Scalars("test/acc_mean")[-1].value == pytest.approx(_acc(model, d.x_test, d.y_test, d.test_offsets))
    with open(run / "fairness_summary.csv") as f:
        row = next(csv.DictReader(f))
    assert float(row["Average"]) == pytest.approx(events.Scalars("test/acc_mean")[-1].value)
    # IGFL's metric closes fit: the last ceil(0.1 x 5) = 1 round is round 5, evaluated once.
    [last] = events.Scalars("test/acc_mean_last10pct")
    assert last.step == 5 and last.value == pytest.approx(events.Scalars("test/acc_mean")[-1].value)
    assert float(row["Average (last 10% of rounds)"]) == pytest.approx(last.value)


class OldSynthetic(FederatedDataModule):
    """The tiny Synthetic(1,1) federation built by hand the way it was built before validation splits."""

    def __init__(self) -> None:
        super().__init__(seed=0, val_fraction=0)

    def build_data(self) -> FederatedData:
        users = generate_synthetic(1.0, 1.0, False, num_clients=6, seed=0, max_samples_per_client=80)
        bounds = offsets_from_sizes([len(y) for _, y in users]).tolist()
        return build_from_pooled(torch.cat([x for x, _ in users]), torch.cat([y for _, y in users]),
                                 [torch.arange(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])], 10, 0.2,
                                 generator_for(0, "synthetic", "train_test_split"))


def test_val_fraction_zero_trains_the_old_training_sets_bitwise(tiny, tmp_path):
    zero = {"class_path": "lightning_fl.datamodules.SyntheticDataModule", "init_args": {**TINY_DATA, "val_fraction": 0}}
    assert run_cli("fit", "--config", str(tiny(data=zero))) == 0
    old = {"class_path": "tests.test_validation_split.OldSynthetic"}
    assert run_cli("fit", "--config", str(tiny(data=old))) == 0
    weights = [torch.load(_version_dir(tmp_path, v) / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
               for v in (0, 1)]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    tags = _events(_version_dir(tmp_path))
    assert not [t for t in tags.Tags()["scalars"] if t.startswith("val/")]
    assert [e.step for e in tags.Scalars("test/acc_mean")] == [2, 4]


@pytest.mark.parametrize("callback", [
    {"class_path": "pytorch_lightning.callbacks.EarlyStopping", "init_args": {"monitor": "val/acc_mean", "mode": "max"}},
    {"class_path": "pytorch_lightning.callbacks.ModelCheckpoint", "init_args": {"monitor": "val/acc_worst20"}},
    {"class_path": "lightning_fl.callbacks.RoundsToTarget", "init_args": {"monitor": "val/acc_mean", "target": 0.5}},
], ids=["EarlyStopping", "ModelCheckpoint", "RoundsToTarget"])
def test_val_monitor_without_validation_split_is_one_line_before_training(tiny, tmp_path, capsys, callback):
    data = {"class_path": "lightning_fl.datamodules.SyntheticDataModule", "init_args": {**TINY_DATA, "val_fraction": 0}}
    callbacks = [{"class_path": "lightning_fl.callbacks.FedAvg"}, callback]
    assert run_cli("fit", "--config", str(tiny(data=data, **{"trainer.callbacks": callbacks}))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    name = callback["class_path"].rsplit(".", 1)[-1]
    monitor = callback["init_args"]["monitor"]
    assert err[-1] == (f"error: {name}.monitor is {monitor}, but data.val_fraction is 0, so no val/* metric is"
                       " logged; set data.val_fraction > 0 (e.g. 0.1) or remove the monitor")
    assert not list((tmp_path / "logs").rglob("*.ckpt"))


def test_misspelt_rounds_to_target_monitor_fails_before_training(tiny, tmp_path, capsys):
    callbacks = [{"class_path": "lightning_fl.callbacks.FedAvg"},
                 {"class_path": "lightning_fl.callbacks.RoundsToTarget",
                  "init_args": {"monitor": "val/acc_avg", "target": 0.5}}]
    assert run_cli("fit", "--config", str(tiny(**{"trainer.callbacks": callbacks}))) == 2
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: RoundsToTarget.monitor must be a metric this run logs, one of val/loss,"
                           " val/acc_mean, val/acc_weighted,")
    assert line.endswith("; got 'val/acc_avg'") and "test/" not in line and "Rounds:" not in err
    assert not list((tmp_path / "logs").rglob("*.ckpt"))


def test_validate_without_validation_split_is_one_line(tiny, tmp_path, capsys):
    data = {"class_path": "lightning_fl.datamodules.SyntheticDataModule", "init_args": {**TINY_DATA, "val_fraction": 0}}
    config = tiny(data=data, **{"trainer.max_epochs": 1})
    assert run_cli("fit", "--config", str(config)) == 0
    ckpt = _version_dir(tmp_path) / "checkpoints" / "last.ckpt"
    assert run_cli("validate", "--config", str(config), "--ckpt_path", str(ckpt)) == 2
    assert "validate needs the clients' validation splits, but data.val_fraction is 0" in capsys.readouterr().err


def test_final_evaluation_without_a_validation_round_reaches_rounds_to_target(tiny, tmp_path):
    # 3 rounds, evaluation every 5: Lightning's validation loop never runs; the final model is
    # evaluated once at the end of fit and RoundsToTarget reads that evaluation (any accuracy >= 0).
    callbacks = [{"class_path": "lightning_fl.callbacks.FedAvg"},
                 {"class_path": "lightning_fl.callbacks.RoundsToTarget",
                  "init_args": {"monitor": "val/acc_mean", "target": 0.0}}]
    config = tiny(**{"trainer.max_epochs": 3, "trainer.check_val_every_n_epoch": 5, "trainer.callbacks": callbacks})
    assert run_cli("fit", "--config", str(config)) == 0
    run = _version_dir(tmp_path)
    events = _events(run)
    assert [e.step for e in events.Scalars("val/acc_mean")] == [3]
    assert [e.step for e in events.Scalars("test/acc_mean")] == [3]
    assert (run / "fairness_summary.md").read_text().startswith("Global model after 3 rounds (client test splits).")
    assert '"round": 3' in (run / "rounds_to_target.json").read_text()
