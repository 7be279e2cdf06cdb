"""Shared fixtures: tiny federated configs that run in about a second each."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from lightning_fl.apps.cli import main
from lightning_fl.state.seeding import derive_seed

torch.set_num_threads(1)  # deterministic and fast on CI's 2 cores

#: The slowest modules (measured with ``pytest --durations=0``), run first: xdist's ``loadscope`` hands out whole
#: modules in collection order (``make test`` turns its reordering by test count off), so a slow module collected
#: last would leave one of CI's two workers idle at the end. The rest keep their collection order.
SLOWEST_FIRST = ("tests/test_state_contract.py", "tests/test_distributed.py", "tests/faults/test_launcher.py",
                 "tests/faults/test_preemption.py", "tests/test_shipped_config_weights.py",
                 "tests/reproduce/test_smoke.py", "tests/privacy/test_dp_runs.py", "tests/test_cli_fit.py",
                 "tests/test_lr_schedule.py", "tests/datamodules/test_real_configs.py",
                 "tests/faults/test_write_failures.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the modules slowest first (:data:`SLOWEST_FIRST`); a module's tests stay together and in order."""
    rank = {module: i for i, module in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


#: The shipped configs' ModelCheckpoint: ``last.ckpt`` after every round (docs/running.md, "Checkpoints and resuming").
ROUND_CHECKPOINT = {"class_path": "pytorch_lightning.callbacks.ModelCheckpoint",
                    "init_args": {"filename": "last", "every_n_epochs": 1, "save_on_train_epoch_end": True,
                                  "enable_version_counter": False}}


def tiny_config(log_dir: Path, **overrides: Any) -> dict[str, Any]:
    """A 6-client Synthetic(1,1) run of 4 rounds with evaluation every 2 rounds."""
    config: dict[str, Any] = {
        "seed_everything": 0,
        "trainer": {
            "max_epochs": 4,
            "check_val_every_n_epoch": 2,
            "accelerator": "cpu",
            "enable_model_summary": False,
            "logger": {"class_path": "pytorch_lightning.loggers.TensorBoardLogger",
                       "init_args": {"save_dir": str(log_dir), "name": "run"}},
            "callbacks": [
                {"class_path": "lightning_fl.callbacks.FedAvg"},
                {"class_path": "lightning_fl.callbacks.FairnessMetrics"},
                ROUND_CHECKPOINT,
            ],
        },
        "model": {
            "client": {"class_path": "lightning_fl.models.LogisticRegression",
                       "init_args": {"in_features": 60, "num_classes": 10}},
            "optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.05}},
            "clients_per_round": 3,
            "local_epochs": 2,
            "batch_size": 10,
        },
        "data": {"class_path": "lightning_fl.datamodules.SyntheticDataModule",
                 "init_args": {"variant": "1_1", "num_clients": 6, "max_samples_per_client": 80}},
    }
    for dotted, value in overrides.items():
        node = config
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node[key]
        node[leaf] = value
    return config


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


def data_required() -> bool:
    """Whether the files of ``make data`` must be present: set on CI, where a missing file fails a test.

    ``LIGHTNING_FL_REQUIRE_DATA=1`` (exported by ``.ci/run``) or a ``CI`` variable (set by CI services)
    turns it on; ``LIGHTNING_FL_REQUIRE_DATA=0`` turns it off. Locally neither is set, so ``make test``
    works without data and the real-data tests skip.
    """
    flag = os.environ.get("LIGHTNING_FL_REQUIRE_DATA")
    if flag is not None:
        return flag.strip() not in ("", "0")
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def skip_without_data(present: bool, reason: str) -> None:
    """Skip the calling test when a ``make data`` file is absent, or fail it where :func:`data_required`."""
    if present:
        return
    if data_required():
        pytest.fail(f"{reason} (required here: LIGHTNING_FL_REQUIRE_DATA or CI is set)")
    pytest.skip(reason)


def reference_epoch_order(seed: int, round_idx: int, client: int, epoch: int, num_samples: int,
                          sub_round: int = 0) -> torch.Tensor:
    """Client ``client``'s sample order in ``epoch`` of round ``round_idx``, written from docs/algorithms.md
    (Local training), not taken from the engines' ``epoch_permutation``: a reference that depends on the
    client id, so an engine whose batch order ignores it fails the tests that use this."""
    keys = (seed, "batches", round_idx, client, epoch) + ((sub_round,) if sub_round > 0 else ())
    return torch.randperm(num_samples, generator=torch.Generator().manual_seed(derive_seed(*keys)))


def run_cli(*args: str) -> int:
    """Run ``python -m lightning_fl`` in-process; returns the exit code (0 when it returns normally)."""
    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


@pytest.fixture
def tiny(tmp_path: Path):
    """Factory: ``tiny(**overrides)`` writes a config and returns its path."""
    counter = iter(range(1000))

    def make(**overrides: Any) -> Path:
        return write_config(tmp_path / f"config_{next(counter)}.yaml", tiny_config(tmp_path / "logs", **overrides))

    return make


@pytest.fixture(autouse=True)
def _fast_tuning_poll(monkeypatch):
    """The tuner polls its runs' checkpoints every 0.5 s; the fake launchers finish at once, so the tests
    poll every 10 ms (what is read and reported does not depend on when)."""
    from lightning_fl.experiments import tuning_runs

    monkeypatch.setattr(tuning_runs, "POLL_SECONDS", 0.01)


@pytest.fixture(scope="session", autouse=True)
def _temporary_folders_under_pytests_own(tmp_path_factory):
    """Trainer roots from ``tempfile.mkdtemp`` (in tests and in the code they run) land in a folder of pytest's,
    which keeps only its last three runs: before, every run of the suite left about 1,500 ``/tmp/lfl-*`` folders.
    Subprocesses (CLI and multi-process tests) follow through ``TMPDIR``."""
    import tempfile

    folder = str(tmp_path_factory.mktemp("tempfile"))
    saved, saved_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir, os.environ["TMPDIR"] = folder, folder
    yield
    tempfile.tempdir = saved
    if saved_env is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved_env
