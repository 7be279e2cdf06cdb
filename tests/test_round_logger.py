"""RoundLogger: one kind per tag, figures as PNG files whatever the logger, histograms as CSV without TensorBoard."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from pytorch_lightning.loggers import MLFlowLogger, WandbLogger

from lightning_fl.reporting.figures import weights_figure
from lightning_fl.reporting.round_logger import RoundLogger, RunOutputs, TagKindError, tag_path
from tests.callbacks.helpers import CHECKPOINT, version_dir
from tests.conftest import run_cli

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _figure(step: int = 1) -> Any:
    return weights_figure(torch.tensor([0.2, 0.8]), [3, 5], step, "weights")


def assert_png(path: Path) -> tuple[int, int]:
    """``path`` is a complete PNG file of an RGB image; returns its (width, height)."""
    assert path.read_bytes()[:8] == PNG_SIGNATURE, path
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG" and image.mode == "RGB"
        return image.size


# ------------------------------------------------------------------------------------ one kind per tag
@pytest.mark.parametrize(("first", "second"), [("histogram", "image"), ("image", "histogram"),
                                               ("scalar", "histogram"), ("histogram", "text")])
def test_a_tag_reused_for_another_kind_raises(first, second):
    log = RoundLogger([], step=1)
    calls = {"scalar": lambda: log.log_scalars({"server/weights": 1.0}),
             "histogram": lambda: log.log_histogram("server/weights", torch.ones(3)),
             "image": lambda: log.log_figure("server/weights", _figure()),
             "text": lambda: log.log_text("server/weights", "x")}
    calls[first]()
    calls[first]()  # the same kind again (another round) is fine
    with pytest.raises(TagKindError, match=f"'server/weights' was logged as a {first} and now as a {second}"):
        calls[second]()


def test_the_kinds_are_shared_by_every_logger_of_the_run():
    outputs = RunOutputs()
    RoundLogger([], step=0, outputs=outputs).log_histogram("server/weights", torch.ones(2))
    later = RoundLogger([], step=3, outputs=outputs).at(4)
    later.log_figure("server/weights_figure", _figure())
    with pytest.raises(TagKindError):
        later.log_figure("server/weights", _figure())


def test_tag_paths_stay_inside_the_run_directory():
    assert tag_path("val/client_acc_figure") == Path("val", "client_acc_figure")
    assert tag_path("/../a b//c") == Path("a_b", "c")
    with pytest.raises(ValueError):
        tag_path("../")


# ------------------------------------------------------------------------------------ files, loggers
def test_figures_and_histograms_go_to_files_without_tensorboard(tmp_path):
    log = RoundLogger([], step=5, outputs=RunOutputs(tmp_path, histogram_files=True))
    log.log_figure("server/weights_figure", _figure())
    log.log_histogram("server/weights", torch.tensor([0.25, 0.75]))
    log.at(6).log_histogram("server/weights", torch.tensor([1.0]))
    width, height = assert_png(tmp_path / "figures" / "server" / "weights_figure" / "round_0005.png")
    assert (width, height) == (400, 400)  # weights_figure: 4 x 4 inches at 100 dpi for two clients
    with open(tmp_path / "histograms" / "server" / "weights.csv") as f:
        assert list(csv.reader(f)) == [["step", "value"], ["5", "0.25"], ["5", "0.75"], ["6", "1.0"]]


def test_other_ranks_write_no_files(tmp_path, monkeypatch):
    from pytorch_lightning.utilities.rank_zero import rank_zero_only
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    wandb = _fake_wandb()
    RoundLogger([wandb], step=1, outputs=RunOutputs(None, histogram_files=True)).log_figure("a_figure", _figure())
    assert wandb.images == [] and not any(tmp_path.iterdir())


class _FakeWandb(WandbLogger):
    """A WandbLogger without wandb: records ``log_image`` calls."""

    def log_image(self, key: str, images: list[Any], step: int | None = None, **kwargs: Any) -> None:
        self.images.append((key, images, step))


def _fake_wandb() -> _FakeWandb:
    logger = object.__new__(_FakeWandb)  # WandbLogger.__init__ needs the wandb package
    logger.images = []
    return logger


class _FakeMlflowClient:
    def __init__(self) -> None:
        self.images: list[tuple[str, np.ndarray, str]] = []

    def log_image(self, run_id: str, image: np.ndarray, artifact_file: str) -> None:
        self.images.append((run_id, image, artifact_file))


class _FakeMlflow(MLFlowLogger):
    """An MLFlowLogger without mlflow: its client records ``log_image`` calls."""

    client = _FakeMlflowClient()

    @property
    def experiment(self) -> _FakeMlflowClient:
        return self.client

    @property
    def run_id(self) -> str:
        return "run-1"


def test_wandb_and_mlflow_get_the_figure_through_their_image_api(tmp_path):
    wandb, mlflow = _fake_wandb(), object.__new__(_FakeMlflow)
    mlflow.client = _FakeMlflowClient()
    RoundLogger([wandb, mlflow], step=7, outputs=RunOutputs(tmp_path)).log_figure("val/client_acc_figure", _figure())
    [(key, [pixels], step)] = wandb.images
    assert (key, step) == ("val/client_acc_figure", 7)
    assert pixels.shape == (400, 400, 3) and pixels.dtype == np.uint8
    [(run_id, image, artifact)] = mlflow.client.images
    assert (run_id, artifact) == ("run-1", "figures/val/client_acc_figure/round_0007.png")
    np.testing.assert_array_equal(image, pixels)
    # The same pixels as the PNG in the run directory.
    with Image.open(tmp_path / "figures" / "val" / "client_acc_figure" / "round_0007.png") as png:
        np.testing.assert_array_equal(np.asarray(png), pixels)


# ------------------------------------------------------------------------------------ whole runs
def _fedfa_run(tiny, **overrides: Any) -> int:
    callbacks = [{"class_path": "lightning_fl.callbacks.FedFa", "init_args": {"figure_every_n_rounds": 2}},
                 {"class_path": "lightning_fl.callbacks.FairnessMetrics"}, CHECKPOINT]
    return run_cli("fit", "--config", str(tiny(**{"trainer.callbacks": callbacks, **overrides})))


def test_a_csv_logger_run_keeps_every_figure_and_histogram(tiny, tmp_path):
    logger = {"class_path": "pytorch_lightning.loggers.CSVLogger",
              "init_args": {"save_dir": str(tmp_path / "logs"), "name": "run"}}
    assert _fedfa_run(tiny, **{"trainer.logger": logger}) == 0
    run = version_dir(tmp_path)
    assert (run / "metrics.csv").exists() and not list(run.glob("events.out.tfevents.*"))
    pngs = sorted(p.relative_to(run / "figures").as_posix() for p in (run / "figures").rglob("*"))
    assert [p for p in pngs if p.endswith(".png")] == [
        "data/label_distribution_figure/round_0000.png",
        "server/weights_figure/round_0001.png", "server/weights_figure/round_0003.png",  # every 2nd round
        "test/client_acc_figure/round_0002.png", "test/client_acc_figure/round_0004.png",  # both splits
        "val/client_acc_figure/round_0002.png", "val/client_acc_figure/round_0004.png"]
    for png in (run / "figures").rglob("*.png"):
        assert_png(png)
    # The weights of each round: 3 clients per round whose FedFa weights sum to 1.
    with open(run / "histograms" / "server" / "weights.csv") as f:
        rows = list(csv.DictReader(f))
    for step in range(1, 5):
        weights = [float(r["value"]) for r in rows if r["step"] == str(step)]
        assert len(weights) == 3 and abs(sum(weights) - 1.0) < 1e-6 and min(weights) > 0, (step, weights)
    with open(run / "histograms" / "data" / "client_train_size.csv") as f:
        sizes = [float(r["value"]) for r in csv.DictReader(f)]
    assert len(sizes) == 6 and all(0 < s <= 80 for s in sizes)  # 6 clients of at most 80 samples, 75% train


def test_without_a_logger_figures_are_skipped_with_one_info_line(tiny, tmp_path, caplog):
    root = tmp_path / "root"
    with caplog.at_level("INFO"):
        assert _fedfa_run(tiny, **{"trainer.logger": False, "trainer.default_root_dir": str(root)}) == 0
    run = root / "lightning_logs" / "version_0"  # a run without a logger still has a folder of its own
    assert (run / "fairness_summary.md").exists()  # the run itself finished and wrote its summary
    assert not (run / "figures").exists() and not (run / "histograms").exists()
    assert [r.getMessage() for r in caplog.records if "figures and histograms are not saved" in r.getMessage()] == [
        "trainer.logger is false: figures and histograms are not saved (any logger, e.g. CSVLogger, keeps them under"
        " its run directory)"]


# ------------------------------------------------------------------------------------ settings
def test_settings_are_logged_when_they_change_within_a_run():
    from tests.callbacks.helpers import RecordingLogger

    outputs = RunOutputs()
    logged = []
    for step, delta, clip in [(1, 1e-3, 1.0), (2, 1e-3, 1.0), (3, 1e-3, 0.5), (4, 1e-3, 0.5)]:
        log = RecordingLogger(step)
        log.outputs = outputs  # one run: every round's logger shares its outputs
        log.log_settings({"dp/delta": delta, "dp/clip_norm": clip})
        logged += log.scalars
    assert logged == [({"dp/delta": 1e-3, "dp/clip_norm": 1.0}, 1), ({"dp/clip_norm": 0.5}, 3)]
    resumed = RecordingLogger(5)  # a resumed run has new outputs: its first round logs them again
    resumed.log_settings({"dp/delta": 1e-3})
    assert resumed.scalars == [({"dp/delta": 1e-3}, 5)]


def test_unmonitored_scalars_reach_the_loggers_but_not_lightnings_log():
    class Logger:
        def __init__(self):
            self.rows = []

        def log_metrics(self, metrics, step):
            self.rows.append((dict(metrics), step))

    logger, monitored = Logger(), []
    log = RoundLogger([logger], 4, monitor=lambda name, value, bar: monitored.append((name, value)))
    log.log_scalars({"acc": 0.5})
    log.log_scalars({"dp/epsilon": 2.0}, monitor=False)
    log.log_settings({"dp/delta": 1e-3}, monitor=False)
    assert logger.rows == [({"acc": 0.5}, 4), ({"dp/epsilon": 2.0}, 4), ({"dp/delta": 1e-3}, 4)]
    assert monitored == [("acc", 0.5)]


def test_non_finite_histogram_values_are_left_out_of_tensorboard(tmp_path):
    # A diverged aggregation's weights (all NaN) made TensorBoard raise "The histogram is empty" before the
    # loop's one-line divergence error; the finite values are what a histogram can show.
    from pytorch_lightning.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = TensorBoardLogger(tmp_path, name="run", version=0)
    log = RoundLogger([logger], step=1)
    log.log_histogram("server/weights", torch.tensor([float("nan")] * 3))
    log.at(2).log_histogram("server/weights", torch.tensor([0.25, float("inf"), 0.75, float("nan")]))
    logger.experiment.flush()
    events = EventAccumulator(str(tmp_path / "run" / "version_0"), size_guidance={"histograms": 0})
    events.Reload()
    (only,) = events.Histograms("server/weights")
    assert only.step == 2 and only.histogram_value.num == 2 and only.histogram_value.sum == 1.0
