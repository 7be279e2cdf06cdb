"""What TensorBoard shows of a run: the shipped configs' promised tags, each under its own plugin (tab).

The event files are read the way the TensorBoard server reads them (``--load_fast=false``): an
``EventMultiplexer`` of plugin event accumulators behind the ``MultiplexerDataProvider`` that the
scalars, histograms, images and text plugins query. A tag belongs to the first plugin that wrote
it, so a histogram and an image under one tag would show only one of them here (and neither in
the default Rust loader).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from tensorboard import context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer

from tests.conftest import run_cli

REPO_ROOT = Path(__file__).resolve().parents[1]

#: Plugin (TensorBoard tab) -> the data provider method that lists its time series.
PLUGINS = {"scalars": "list_scalars", "histograms": "list_tensors", "images": "list_blob_sequences",
           "text": "list_tensors"}

FAIRNESS = ("val/acc_mean", "val/acc_weighted", "val/acc_pooled", "val/acc_worst20", "val/acc_best20", "val/acc_var",
            "val/acc_std", "val/acc_min", "val/acc_max", "val/jain")
FAIRNESS += tuple(name.replace("val/", "test/", 1) for name in FAIRNESS)  # validation and test splits
#: What every run writes (docs/outputs.md, "What a run writes").
EVERY_RUN = {
    "scalars": {*FAIRNESS, "train/loss", "train/acc", "round/seconds", "round/clients"},
    "histograms": {"val/client_acc", "test/client_acc"},
    "images": {"val/client_acc_figure", "test/client_acc_figure"},
}
#: What the partition run of a data set holds (``<save_dir>/partitions/<data module>-<digest>``).
PARTITION_RUN = {
    "histograms": {"data/client_emd", "data/client_train_size"},
    "images": {"data/label_distribution_figure"},
    "text": {"data/summary/text_summary"},  # torch's SummaryWriter.add_text appends "/text_summary"
}
#: Per shipped config: the algorithm tags docs/outputs.md, the callback's docstring and the config promise.
PROMISED = {
    "fedfa_synthetic": {"scalars": {"server/momentum_norm"}, "histograms": {"server/weights"},
                        "images": {"server/weights_figure"}},
    "fedfa_mo_synthetic": {"scalars": {"server/momentum_norm"}, "histograms": {"server/weights"},
                           "images": {"server/weights_figure"}},
    "dwfed_synthetic": {"histograms": {"server/weights", "server/emd"}, "images": {"server/weights_figure"}},
    "igfl_synthetic": {"histograms": {"server/weights"}, "images": {"server/attention_figure"}},
    "igfl_s_synthetic": {"histograms": {"server/weights"}, "images": {"server/attention_figure"}},
    "fedadp_synthetic": {"scalars": {"server/smoothed_angle_mean"},
                         "histograms": {"server/weights", "server/smoothed_angle"}},
    "scaffold_synthetic": {"scalars": {"server/control_norm"}},
    "tempo_synthetic": {"scalars": {"tempo/epochs_0", "tempo/distance_4", "comm/total_bytes", "comm/client_up_bytes",
                                    "comm/institution_up_bytes", "net/round_seconds", "net/elapsed_seconds"}},
}
ROUNDS = 2
#: Small federations so each run takes a few seconds.
SMALL = {
    "tempo_synthetic": ["--data.init_args.num_samples", "1500", "--data.init_args.num_clients", "15",
                        "--model.local_epochs", "1"],
}


def plugin_tags(logdir: Path) -> dict[str, dict[str, Any]]:
    """Plugin name -> {tag: time series} of the one run under ``logdir``, as TensorBoard's plugins list them."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(logdir))
    ctx = context.RequestContext()
    shown: dict[str, dict[str, Any]] = {}
    for plugin, method in PLUGINS.items():
        runs = getattr(provider, method)(ctx, experiment_id="", plugin_name=plugin)
        assert len(runs) <= 1, runs.keys()
        shown[plugin] = next(iter(runs.values()), {})
    return shown


def assert_one_plugin_per_tag(shown: dict[str, dict[str, Any]]) -> None:
    seen: dict[str, str] = {}
    for plugin, series in shown.items():
        for tag in series:
            assert tag not in seen, f"{tag} is under {seen[tag]} and {plugin}"
            seen[tag] = plugin


def run_shipped(stem: str, tmp_path: Path, *extra: str) -> Path:
    """``configs/<stem>.yaml`` for ``ROUNDS`` rounds, evaluated every round; returns its run directory."""
    args = ["fit", "--config", str(REPO_ROOT / "configs" / f"{stem}.yaml"),
            "--trainer.max_epochs", str(ROUNDS), "--trainer.check_val_every_n_epoch", "1",
            "--trainer.logger.init_args.save_dir", str(tmp_path / "logs"), "--trainer.logger.init_args.name", stem,
            *SMALL.get(stem, []), *extra]
    assert run_cli(*args) == 0
    [run] = (tmp_path / "logs" / stem).iterdir()
    return run


@pytest.mark.parametrize("stem", sorted(PROMISED))
def test_every_promised_tag_shows_in_its_own_tensorboard_tab(stem, tmp_path):
    run = run_shipped(stem, tmp_path)
    shown = plugin_tags(run)
    assert_one_plugin_per_tag(shown)
    for plugin in PLUGINS:
        expected = EVERY_RUN.get(plugin, set()) | PROMISED[stem].get(plugin, set())
        missing = expected - set(shown[plugin])
        assert not missing, f"{stem}: {sorted(missing)} not under the {plugin} tab; it has {sorted(shown[plugin])}"
    # The partition is logged once per data set, at step 0, in a run of its own.
    [partition] = (tmp_path / "logs" / "partitions").iterdir()
    assert partition.name.startswith(("SyntheticDataModule-", "PooledSyntheticDataModule-"))
    partition_shown = plugin_tags(partition)
    for plugin, tags in PARTITION_RUN.items():
        assert set(partition_shown[plugin]) == tags, (plugin, sorted(partition_shown[plugin]))
    assert partition_shown["images"]["data/label_distribution_figure"].max_step == 0
    # Per-round views end at the last round.
    for tag in PROMISED[stem].get("images", set()) | PROMISED[stem].get("histograms", set()):
        series = shown["images"].get(tag) or shown["histograms"][tag]
        assert series.max_step == ROUNDS, (tag, series.max_step)


def test_a_tensorboard_run_also_writes_every_figure_as_png(tmp_path):
    run = run_shipped("dwfed_synthetic", tmp_path)
    pngs = sorted(p.relative_to(run).as_posix() for p in (run / "figures").rglob("*.png"))
    assert pngs == ["figures/data/label_distribution_figure/round_0000.png",
                    *[f"figures/server/weights_figure/round_{r:04d}.png" for r in range(1, ROUNDS + 1)],
                    *[f"figures/test/client_acc_figure/round_{r:04d}.png" for r in range(1, ROUNDS + 1)],
                    *[f"figures/val/client_acc_figure/round_{r:04d}.png" for r in range(1, ROUNDS + 1)]]
    assert not (run / "histograms").exists()  # TensorBoard has them


def test_the_hparams_tab_lists_the_settings_and_the_fairness_metrics(tmp_path):
    from tensorboard.plugins.hparams import plugin_data_pb2

    run = run_shipped("fedfa_synthetic", tmp_path)
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(run))
    multiplexer.Reload()
    [content] = multiplexer.PluginRunToTagToContent("hparams").values()
    data = {tag: plugin_data_pb2.HParamsPluginData.FromString(blob) for tag, blob in content.items()}
    session = data["_hparams_/session_start_info"].session_start_info.hparams
    assert session["algorithm"].string_value == "FedFa"
    assert session["callbacks.FedFa.alpha"].number_value == 0.5  # configs/fedfa_synthetic.yaml
    assert session["model.local_epochs"].number_value == 2 and session["model.optimizer.lr"].number_value == 0.01
    assert session["data.variant"].string_value == "1_1"
    assert session["rounds"].number_value == ROUNDS
    metrics = {m.name.tag for m in data["_hparams_/experiment"].experiment.metric_infos}
    assert {"val/acc_mean", "test/acc_mean", "test/acc_worst20", "test/acc_var"} <= metrics
    # Every run declares the same columns (TensorBoard shows the first declaration it finds), so the
    # algorithm's arguments share one column; the first five by name are the ones ticked by default.
    declared = [h.name for h in data["_hparams_/experiment"].experiment.hparam_infos]
    assert sorted(declared)[:5] == ["algorithm", "algorithm.args", "client.optimizer", "data.partition", "data.set"]
    assert session["algorithm.args"].string_value.startswith("alpha=0.5, beta=0.5")
    assert session["client.optimizer"].string_value == "SGD(lr=0.01, momentum=0.5)"
    first = [m.name.tag for m in data["_hparams_/experiment"].experiment.metric_infos][:2]
    assert first == ["test/acc_mean", "test/acc_worst20"]
    saved = yaml.safe_load((run / "hparams.yaml").read_text())  # Lightning's file holds the settings
    assert saved["callbacks.FedFa.alpha"] == 0.5 and saved["algorithm"] == "FedFa"
    # TensorBoard fills the table from the run's own scalars under those tags (no placeholder values).
    scalars = plugin_tags(run)["scalars"]
    assert scalars["test/acc_mean"].max_step == ROUNDS
