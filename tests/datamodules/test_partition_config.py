"""A partition configured in YAML (``{class_path, init_args}``) is the partition built in Python."""

from __future__ import annotations

import contextlib
import io

import pytest
import torch
import yaml
from lightning_fl.datamodules import DigitsDataModule
from lightning_fl.datamodules.partitions import (
    IID,
    Dirichlet,
    PerClientDirichlet,
    PowerLawClasses,
    Quantity,
    Shards,
)

from lightning_fl.apps.cli import FederatedCLI
from lightning_fl.state.seeding import generator_for
from tests.conftest import run_cli, tiny_config, write_config

PARTITIONS = [
    ("IID", {}, IID()),
    ("Dirichlet", {"alpha": 0.3, "min_size": 5, "cap_at_mean": True},
     Dirichlet(alpha=0.3, min_size=5, cap_at_mean=True)),
    ("Shards", {"classes_per_client": 3}, Shards(classes_per_client=3)),
    ("Quantity", {"distribution": "power_law", "power": 2.0, "min_size": 20},
     Quantity(distribution="power_law", power=2.0, min_size=20)),
    ("PerClientDirichlet", {"rho": 1.0, "size": 30, "prior": "uniform"},
     PerClientDirichlet(rho=1.0, size=30, prior="uniform")),
    ("PowerLawClasses", {"classes_per_client": 2, "sigma": 1.0, "min_per_class": 4},
     PowerLawClasses(classes_per_client=2, sigma=1.0, min_per_class=4)),
]


def digits_config(tmp_path, partition) -> str:  # type: ignore[no-untyped-def]
    config = tiny_config(tmp_path / "logs", **{
        "data": {"class_path": "lightning_fl.datamodules.DigitsDataModule",
                 "init_args": {"num_clients": 12, "seed": 5, "partition": partition}},
        "model.client.init_args.in_features": 64,
    })
    return str(write_config(tmp_path / "config.yaml", config))


def from_yaml(config: str) -> DigitsDataModule:
    cli = FederatedCLI(args=["--config", config], run=False)
    return cli.datamodule


@pytest.mark.parametrize(("name", "init_args", "direct"), PARTITIONS, ids=[p[0] for p in PARTITIONS])
def test_yaml_partition_equals_direct_construction(tmp_path, name, init_args, direct):
    spec = {"class_path": f"lightning_fl.datamodules.partitions.{name}", "init_args": init_args}
    dm = from_yaml(digits_config(tmp_path, spec))
    assert type(dm.partition) is type(direct) and dm.partition == direct
    dm.setup()
    built = DigitsDataModule(num_clients=12, seed=5, partition=direct)
    built.setup()
    for field in ("x_train", "y_train", "train_offsets", "x_val", "y_val", "val_offsets", "x_test", "y_test",
                  "test_offsets"):
        assert torch.equal(getattr(dm.data, field), getattr(built.data, field)), field
    # and both are the partition drawn by hand from the datamodule's partition stream
    labels = torch.from_numpy(__import__("sklearn.datasets", fromlist=["load_digits"]).load_digits().target).long()
    clients = direct(labels, 12, generator_for(5, "partition"))
    assert [len(c) for c in clients] == [int(tr + te) for tr, te in zip(dm.data.train_sizes() + dm.data.val_sizes(),
                                                                           dm.data.test_sizes())]


def test_print_config_shows_the_partition_and_reads_back(tmp_path):
    spec = {"class_path": "lightning_fl.datamodules.partitions.Dirichlet", "init_args": {"alpha": 0.3}}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run_cli("fit", "--config", digits_config(tmp_path, spec), "--print_config") == 0
    printed = yaml.safe_load(out.getvalue())
    assert printed["data"]["init_args"]["partition"] == {
        "class_path": "lightning_fl.datamodules.partitions.Dirichlet",
        "init_args": {"alpha": 0.3, "min_size": 10, "cap_at_mean": False, "max_tries": 100},
    }
    for key in ("ckpt_path", "weights_only"):  # arguments of the fit subcommand, not of the configuration
        printed.pop(key, None)
    (tmp_path / "printed.yaml").write_text(yaml.safe_dump(printed))
    assert from_yaml(str(tmp_path / "printed.yaml")).partition == Dirichlet(alpha=0.3)


def test_command_line_partition_overrides(tmp_path):
    spec = {"class_path": "lightning_fl.datamodules.partitions.Dirichlet", "init_args": {"alpha": 0.3, "min_size": 5}}
    config = digits_config(tmp_path, spec)
    cli = FederatedCLI(args=["--config", config, "--data.init_args.partition.alpha", "1.5"], run=False)
    assert cli.datamodule.partition == Dirichlet(alpha=1.5, min_size=5)  # the other options are kept
    cli = FederatedCLI(args=["--config", config, "--data.init_args.partition", "Shards"], run=False)
    assert cli.datamodule.partition == Shards()
    assert from_yaml(digits_config(tmp_path, None)).partition == IID()  # null: the datamodule's default
