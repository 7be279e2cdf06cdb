"""Two runs into one ``save_dir`` keep their own files, whatever the logger.

W&B and MLflow are not installed here; :class:`FolderlessLogger` behaves as they do towards Lightning
(``trainer.log_dir`` is the ``save_dir`` itself; runs differ by ``version``, a run id).
"""

from __future__ import annotations

from typing import Any

import pytest
from pytorch_lightning.loggers import Logger
from pytorch_lightning.utilities import rank_zero_only

from tests.conftest import run_cli


class FolderlessLogger(Logger):
    """A logger like ``WandbLogger``: one ``save_dir`` for every run, a run id as ``version``."""

    def __init__(self, save_dir: str, version: str, name: str = "project") -> None:
        super().__init__()
        self._save_dir, self._version, self._name = save_dir, version, name

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> str:
        return self._version

    @property
    def save_dir(self) -> str:
        return self._save_dir

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        pass

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


def _logger(kind: str, save_dir: str, run: str) -> Any:
    if kind == "folderless":
        return {"class_path": "tests.test_run_directory.FolderlessLogger",
                "init_args": {"save_dir": save_dir, "version": f"run-{run}"}}
    return {"class_path": f"pytorch_lightning.loggers.{kind}", "init_args": {"save_dir": save_dir, "name": "cmp"}}


@pytest.mark.parametrize("kind", ["folderless", "TensorBoardLogger", "CSVLogger"])
def test_two_algorithms_into_one_save_dir_keep_their_own_files(kind, tiny, tmp_path):
    save_dir = str(tmp_path / "shared")
    for algorithm in ("FedFa", "FedAvg"):
        callbacks = [{"class_path": f"lightning_fl.callbacks.{algorithm}"},
                     {"class_path": "lightning_fl.callbacks.FairnessMetrics"}]
        config = tiny(**{"trainer.logger": _logger(kind, save_dir, algorithm), "trainer.callbacks": callbacks,
                         "trainer.max_epochs": 2})
        assert run_cli("fit", "--config", str(config)) == 0
    summaries = sorted((tmp_path / "shared").rglob("fairness_summary.md"))
    assert len(summaries) == 2, summaries
    methods = sorted(line.split("|")[1].strip() for s in summaries for line in s.read_text().splitlines()
                     if line.startswith("| Fed"))
    assert methods == ["FedAvg", "FedFa"]
    # Each run's figures and client table sit in its own folder, beside its own checkpoints.
    for summary in summaries:
        run = summary.parent
        assert (run / "client_accuracy.csv").is_file()
        assert sorted(p.name for p in (run / "figures" / "data").iterdir()) == ["label_distribution_figure"]
    assert not (tmp_path / "shared" / "fairness_summary.md").exists()
    if kind == "folderless":
        assert {s.parent.name for s in summaries} == {"run-FedFa", "run-FedAvg"}
        assert all((s.parent / "checkpoints").is_dir() for s in summaries)


@pytest.mark.parametrize(("logger", "package"), [("WandbLogger", "wandb"), ("MLFlowLogger", "mlflow")])
def test_an_optional_logger_without_its_package_says_what_to_install_in_one_line(logger, package, tiny, capsys):
    try:
        __import__(package)
        pytest.skip(f"{package} is installed here")
    except ImportError:
        pass
    assert run_cli("fit", "--config", str(tiny()), "--trainer.logger", logger) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {logger} needs the package {package}, which is not installed: pip install -e '.[{package}]'"]


def test_runs_without_a_logger_get_a_folder_each_and_resume_in_theirs(tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tiny(**{"trainer.logger": False, "trainer.max_epochs": 2})
    assert run_cli("fit", "--config", str(config)) == 0
    assert run_cli("fit", "--config", str(config)) == 0
    runs = tmp_path / "lightning_logs"
    assert sorted(p.name for p in runs.iterdir()) == ["version_0", "version_1"]
    for run in runs.iterdir():
        assert (run / "fairness_summary.md").is_file() and (run / "checkpoints" / "last.ckpt").is_file()
    assert not (tmp_path / "fairness_summary.md").exists() and not (tmp_path / "checkpoints").exists()
    checkpoint = runs / "version_0" / "checkpoints" / "last.ckpt"
    assert run_cli("fit", "--config", str(config), "--trainer.max_epochs", "3", "--ckpt_path", str(checkpoint)) == 0
    assert sorted(p.name for p in runs.iterdir()) == ["version_0", "version_1"]  # went on in version_0
    assert "after 3 rounds" in (runs / "version_0" / "fairness_summary.md").read_text()
