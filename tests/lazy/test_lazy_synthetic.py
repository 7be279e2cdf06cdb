"""The per_client Synthetic generator: lazy staging gives bitwise the eager federation's samples."""

import numpy as np
import pytest
import torch

from lightning_fl.datamodules.lazy_synthetic import LazySyntheticData, split_sizes, synthetic_sizes
from lightning_fl.datamodules import SyntheticDataModule
from lightning_fl.faults.validation import ConfigError
from lightning_fl.state.data import ClientData


def _pair(**kwargs) -> tuple[SyntheticDataModule, SyntheticDataModule]:
    common = dict(variant="1_1", num_clients=12, seed=5, max_samples_per_client=120, generator="per_client", **kwargs)
    eager, lazy = SyntheticDataModule(**common), SyntheticDataModule(lazy=True, **common)
    eager.setup()
    lazy.setup()
    return eager, lazy


@pytest.mark.parametrize("val_fraction", [0.1, 0.0])
def test_lazy_stage_is_bitwise_the_eager_clients(val_fraction: float) -> None:
    eager, lazy = _pair(val_fraction=val_fraction)
    assert not eager.is_lazy and lazy.is_lazy and isinstance(lazy.data, ClientData)
    for split in ("train", "test") + (("val",) if val_fraction else ()):
        assert torch.equal(lazy.data.sizes(split), eager.data.sizes(split)), split
    ids = torch.tensor([11, 0, 7, 3])
    for split in ("train", "test") + (("val",) if val_fraction else ()):
        staged = lazy.data.stage(ids, split)
        for position, k in enumerate(ids.tolist()):
            x, y = getattr(eager.data, f"client_{split}")(k)
            got_x, got_y = getattr(staged, f"client_{split}")(position)
            assert torch.equal(got_x, x) and torch.equal(got_y, y), (split, k)


def test_client_samples_depend_on_seed_and_client_only() -> None:
    small = LazySyntheticData(1.0, 1.0, False, num_clients=20, seed=3, max_samples_per_client=80)
    large = LazySyntheticData(1.0, 1.0, False, num_clients=1000, seed=3, max_samples_per_client=80)
    a, b = small.stage([4, 19]), large.stage([4, 19])
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_train, b.y_train)
    other = LazySyntheticData(1.0, 1.0, False, num_clients=20, seed=4, max_samples_per_client=80).stage([4, 19])
    assert not torch.equal(other.x_train[:5], a.x_train[:5])


def test_sizes_come_from_the_size_stream_alone() -> None:
    # The sizes are numpy's lognormal(4, 2) of the stream [seed, 0], + 50, capped: recomputed by hand.
    expected = np.minimum(np.random.default_rng([7, 0]).lognormal(4, 2, 5).astype(np.int64) + 50, 400)
    assert synthetic_sizes(5, 7, 400).tolist() == expected.tolist()
    # n = 37: test round(7.4) = 7; train 30, val round(3.0) = 3 -> 27 / 3 / 7. n = 2: test round(0.4) = 0;
    # val round(0.2) = 0. n = 1: everything stays in train.
    parts = split_sizes(np.array([37, 2, 1]), 0.2, 0.1)
    assert parts["train"].tolist() == [27, 2, 1] and parts["val"].tolist() == [3, 0, 0]
    assert parts["test"].tolist() == [7, 0, 0]


def test_lazy_labels_follow_the_client_model() -> None:
    # y = argmax(x W_k + b_k): a client's labels are mostly one or two classes under Synthetic(1,1) but vary.
    source = LazySyntheticData(1.0, 1.0, False, num_clients=50, seed=0, val_fraction=0.0)
    staged = source.stage(torch.arange(50))
    assert staged.y_train.min() >= 0 and staged.y_train.max() <= 9
    assert len(staged.y_train.unique()) > 3


def test_lazy_needs_the_per_client_generator() -> None:
    with pytest.raises(ConfigError, match="data.lazy: true needs data.generator: per_client"):
        SyntheticDataModule(lazy=True)
    with pytest.raises(ConfigError, match="data.lazy must be true or false"):
        SyntheticDataModule(lazy="yes", generator="per_client")


def test_lazy_datamodule_refuses_label_histograms_but_summarises() -> None:
    _, lazy = _pair()
    with pytest.raises(ConfigError, match="label histograms are not counted"):
        lazy.label_histograms()
    summary = lazy.partition_summary()
    assert summary["num_clients"] == 12 and "mean_emd" not in summary
    assert summary["train_samples"] == int(lazy.data.sizes("train").sum())
