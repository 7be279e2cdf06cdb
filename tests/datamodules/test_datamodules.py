"""Tests for FederatedDataModule, PooledDataModule and DigitsDataModule (SPEC section 8)."""

from __future__ import annotations

import lightning_fl.datamodules as datamodules
import pytest
import torch
from lightning_fl.datamodules import (
    DigitsDataModule,
    FederatedData,
    FederatedDataModule,
    PooledDataModule,
    PooledSyntheticDataModule,
    SyntheticDataModule,
)
from lightning_fl.datamodules.partitions import IID, Dirichlet, Quantity, Shards
from matplotlib.figure import Figure
from torch.utils.data import DataLoader

from lightning_fl.state.data import offsets_from_sizes


class HandMade(FederatedDataModule):
    """Two clients with train labels [0, 0, 1] and [1, 1, 1, 2]; counts builds."""

    def __init__(self) -> None:
        super().__init__(seed=0, test_fraction=0.2)
        self.builds = 0

    def build_data(self) -> FederatedData:
        self.builds += 1
        y_train = torch.tensor([0, 0, 1, 1, 1, 1, 2])
        y_test = torch.tensor([2, 0])
        return FederatedData(
            x_train=torch.randn(7, 3), y_train=y_train, train_offsets=offsets_from_sizes([3, 4]),
            x_test=torch.randn(2, 3), y_test=y_test, test_offsets=offsets_from_sizes([1, 1]), num_classes=3,
        )


def test_exports():
    for name in ["FederatedData", "FederatedDataModule", "SyntheticDataModule", "PooledDataModule",
                 "DigitsDataModule", "split_train_test"]:
        assert hasattr(datamodules, name), name
    # one class path per partition: lightning_fl.datamodules.partitions.<Name>
    assert not hasattr(datamodules, "Dirichlet") and hasattr(datamodules.partitions, "Dirichlet")


def test_setup_is_idempotent_and_properties():
    dm = HandMade()
    with pytest.raises(RuntimeError, match="setup"):
        _ = dm.data
    dm.setup("fit")
    first = dm.data
    dm.setup("validate")
    dm.setup()
    assert dm.builds == 1 and dm.data is first
    assert (dm.num_clients, dm.num_classes, dm.input_shape) == (2, 3, (3,))


def test_label_histograms_and_emd_by_hand():
    dm = HandMade()
    dm.setup()
    hist = dm.label_histograms()
    assert hist.dtype == torch.long
    assert hist.tolist() == [[2, 1, 0], [0, 3, 1]]
    # P = (2, 4, 1) / 7; p_0 = (2/3, 1/3, 0) -> 8/21 + 5/21 + 3/21 = 16/21;
    # p_1 = (0, 3/4, 1/4) -> 2/7 + 5/28 + 3/28 = 4/7.
    torch.testing.assert_close(dm.emd_to_population(), torch.tensor([16 / 21, 4 / 7], dtype=torch.float64))


def test_partition_summary_by_hand():
    dm = HandMade()
    dm.setup()
    summary = dm.partition_summary()
    assert summary["num_clients"] == 2
    assert (summary["train_size_min"], summary["train_size_median"], summary["train_size_max"]) == (3, 3.5, 4)
    assert summary["mean_emd"] == pytest.approx((16 / 21 + 4 / 7) / 2)


def test_round_tickets_are_one_batch():
    dm = HandMade()
    dm.setup()
    for loader in (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()):
        assert isinstance(loader, DataLoader) and loader.batch_size is None
        assert len(loader) == 1
        assert list(loader) == [0]


def test_partition_figure_small():
    dm = HandMade()
    dm.setup()
    fig = dm.partition_figure()
    assert isinstance(fig, Figure)
    heat, colorbar = fig.axes  # heat map plus its colour bar
    assert heat.get_xlabel() == "class" and heat.get_ylabel() == "client"
    image = heat.get_images()[0].get_array()
    torch.testing.assert_close(torch.as_tensor(image.data), torch.tensor([[2 / 3, 1 / 3, 0], [0, 3 / 4, 1 / 4]],
                                                                          dtype=torch.float64))
    fig.canvas.draw()  # renders on Agg without a display


def test_partition_figure_thins_ticks_for_many_clients():
    x, y = torch.randn(3000, 2), torch.arange(3000) % 10
    dm = PooledDataModule(x, y, partition=IID(), num_clients=1000, test_fraction=0.0)
    dm.setup()
    fig = dm.partition_figure()
    fig.canvas.draw()
    heat = fig.axes[0]
    assert heat.get_images()[0].get_array().shape == (1000, 10)
    visible = [t for t in heat.get_yticks() if 0 <= t <= 999]
    assert 2 <= len(visible) <= 20
    assert fig.get_size_inches()[1] <= 12


def test_base_rejects_test_fraction():
    with pytest.raises(ValueError) as err:
        PooledDataModule(torch.randn(10, 2), torch.zeros(10, dtype=torch.long), num_clients=2, test_fraction=1.5)
    assert str(err.value).startswith("test_fraction must be") and "\n" not in str(err.value)


# ----------------------------------------------------------------------------- pooled
def indexed_pool(n: int, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x holds each sample's own index, so the federation's rows reveal where they came from."""
    return torch.arange(n, dtype=torch.float32).unsqueeze(1), torch.arange(n) % num_classes


@pytest.mark.parametrize("partition", [IID(), Dirichlet(alpha=1.0, min_size=5), Shards(classes_per_client=2),
                                       Quantity(min_size=5)], ids=["iid", "dirichlet", "shards", "quantity"])
def test_pooled_clients_are_disjoint_and_cover(partition):
    x, y = indexed_pool(400, 5)
    dm = PooledDataModule(x, y, partition=partition, num_clients=8, seed=3)
    dm.setup()
    data = dm.data
    rows = torch.cat([data.x_train[:, 0], data.x_val[:, 0], data.x_test[:, 0]]).long()
    assert torch.equal(rows.sort().values, torch.arange(400))
    assert torch.equal(data.y_train, y[data.x_train[:, 0].long()])
    assert torch.equal(data.y_val, y[data.x_val[:, 0].long()])
    assert torch.equal(data.y_test, y[data.x_test[:, 0].long()])
    assert dm.num_clients == 8 and dm.num_classes == 5
    assert dm.label_histograms().sum() == len(data.y_train)


def test_pooled_partition_does_not_depend_on_test_fraction():
    x, y = indexed_pool(300, 3)

    def client_sets(test_fraction: float) -> list[set[int]]:
        dm = PooledDataModule(x, y, partition=Dirichlet(alpha=0.5, min_size=5), num_clients=6, seed=4,
                              test_fraction=test_fraction)
        dm.setup()
        d = dm.data
        return [set(torch.cat([d.client_train(k)[0], d.client_val(k)[0], d.client_test(k)[0]])[:, 0].long().tolist())
                for k in range(d.num_clients)]

    assert client_sets(0.2) == client_sets(0.5)


def test_pooled_shards_one_class_per_client():
    x, y = indexed_pool(200, 4)
    dm = PooledDataModule(x, y, partition=Shards(classes_per_client=1), num_clients=8, seed=1)
    dm.setup()
    classes_per_client = (dm.label_histograms() > 0).sum(dim=1)
    assert classes_per_client.tolist() == [1] * 8
    assert torch.allclose(dm.emd_to_population(), torch.full((8,), 1.5, dtype=torch.float64))  # 2 (1 - 1/4)


def test_pooled_unknown_partition_fails_in_init():
    with pytest.raises(ValueError) as err:
        PooledDataModule(partition="foo")
    assert str(err.value).startswith(
        "partition must be one of Dirichlet, IID, PerClientDirichlet, PowerLawClasses, Quantity, Shards")
    assert str(err.value).endswith("; got 'foo'") and "\n" not in str(err.value)


def test_pooled_default_partitions():
    assert PooledDataModule().partition == IID() and DigitsDataModule().partition == IID()
    assert PooledSyntheticDataModule().partition == Dirichlet(alpha=0.1, min_size=2, cap_at_mean=True)


@pytest.mark.parametrize(
    ("make", "field"),
    [(lambda: PooledDataModule(partition=Dirichlet(alpha=0)), "partition.alpha"),
     (lambda: PooledDataModule(num_clients=0), "num_clients"),
     (lambda: PooledDataModule(partition=Dirichlet(alpha=0.5, min_size=0)), "partition.min_size"),
     (lambda: PooledDataModule(partition=Shards(classes_per_client=0)), "partition.classes_per_client"),
     (lambda: PooledDataModule(partition=Quantity(distribution="zipf")), "partition.distribution"),
     (lambda: PooledDataModule(partition=Quantity(sigma=-1)), "partition.sigma")],
)
def test_pooled_option_errors_in_init(make, field):
    with pytest.raises(ValueError, match=f"^{field} must be") as err:
        make()
    assert "\n" not in str(err.value)


def test_pooled_data_dependent_errors():
    x, y = indexed_pool(50, 5)
    # with tensors given: checked in __init__
    with pytest.raises(ValueError, match="^partition.classes_per_client must be between 1 and 5"):
        PooledDataModule(x, y, partition=Shards(classes_per_client=6), num_clients=5)
    with pytest.raises(ValueError, match="^num_clients must be an integer between 1 and 50"):
        PooledDataModule(x, y, num_clients=51)

    # with a lazy load_pooled: checked at setup
    class Lazy(PooledDataModule):
        def load_pooled(self):
            return x, y

    lazy = Lazy(partition=Dirichlet(alpha=0.5, min_size=6), num_clients=10)
    with pytest.raises(ValueError, match="^partition.min_size must be at most 5"):
        lazy.setup()


def test_pooled_needs_data():
    with pytest.raises(ValueError, match="load_pooled"):
        PooledDataModule().setup()


# ----------------------------------------------------------------------------- digits
def test_digits_flat_and_image_shapes():
    flat = DigitsDataModule(num_clients=20)
    flat.setup()
    assert flat.input_shape == (64,) and flat.num_clients == 20 and flat.num_classes == 10
    assert len(flat.data.y_train) + len(flat.data.y_val) + len(flat.data.y_test) == 1797
    assert float(flat.data.x_train.min()) >= 0.0 and float(flat.data.x_train.max()) == 1.0
    image = DigitsDataModule(num_clients=20, flatten=False)
    image.setup()
    assert image.input_shape == (1, 8, 8)
    # same seed, same partition: the flattened images are the same samples
    assert torch.equal(image.data.x_train.reshape(-1, 64), flat.data.x_train)


def test_digits_one_class_per_client():
    dm = DigitsDataModule(num_clients=20, partition=Shards(classes_per_client=1))
    dm.setup()
    hist = dm.label_histograms()
    assert ((hist > 0).sum(dim=1) == 1).all()
    assert ((hist > 0).sum(dim=0) == 2).all()  # 20 shards over 10 near-equal classes: 2 each


def test_synthetic_module_is_a_federated_datamodule():
    assert issubclass(SyntheticDataModule, FederatedDataModule)
    assert issubclass(DigitsDataModule, PooledDataModule)
