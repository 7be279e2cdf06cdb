"""IGFL's reproduction: the last-10%-of-rounds metric by hand, the derived configs, the printed numbers."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

from lightning_fl.reproduce.igfl import (
    BASE,
    PAPER,
    cifar10_present,
    last_rounds_percent,
)
from lightning_fl.reproduce.paper import SettingResults
from lightning_fl.reproduce.settings import Setting, apply_changes

REPO = Path(__file__).resolve().parents[2]
#: The aggregation callback each method appends (FedAvg: none, the loop's default).
AGGREGATION = {"FedAvg": None, "FedProx": "FedProx", "FedAvgM": "FedAvgM", "FedAdam": "FedAdam",
               "IGFL-C": "IGFLClient", "IGFL-S": "IGFLServer", "IGFL": "IGFL"}


def _results(evaluations: dict[int, float], metric: str = "acc_pooled") -> SettingResults:
    rows = [("IGFL/seed_0", "IGFL", 0, r, "test", metric, v) for r, v in evaluations.items()]
    rows += [("IGFL/seed_0", "IGFL", 0, r, "val", metric, 0.0) for r in evaluations]  # validation never counts
    return SettingResults(Setting("s", {"IGFL": BASE}), [0], rows, [])


def test_last_rounds_average_by_hand() -> None:
    # 20 rounds: the window is the last ceil(0.1 x 20) = 2 rounds, 19 and 20: (0.6 + 0.7) / 2 = 65%.
    results = _results({10: 0.5, 19: 0.6, 20: 0.7})
    assert last_rounds_percent(results, "IGFL", 0, "acc_pooled") == pytest.approx(65.0)
    # 25 rounds: ceil(2.5) = 3 rounds, 23..25: (0.2 + 0.4 + 0.9) / 3 = 50%; round 22 is outside.
    results = _results({20: 0.0, 22: 0.0, 23: 0.2, 24: 0.4, 25: 0.9})
    assert last_rounds_percent(results, "IGFL", 0, "acc_pooled") == pytest.approx(50.0)


def test_an_incomplete_window_or_a_missing_metric_is_refused() -> None:
    with pytest.raises(ValueError, match="of the last 2 rounds only \\[20\\] were evaluated"):
        last_rounds_percent(_results({10: 0.5, 20: 0.7}), "IGFL", 0, "acc_pooled")
    with pytest.raises(KeyError):
        last_rounds_percent(_results({10: 0.5}, metric="acc_mean"), "IGFL", 0, "acc_pooled")


@pytest.mark.parametrize("scale", ["smoke", "small", "paper"])
def test_every_method_appends_its_aggregation_and_evaluates_the_whole_window(scale: str) -> None:
    callbacks = importlib.import_module("lightning_fl.callbacks")
    base = yaml.safe_load((REPO / BASE).read_text())
    for setting in PAPER.settings(scale):
        for method in setting.methods:
            config = apply_changes(base, {**setting.common, **setting.changes.get(method, {})})
            ours = [c for c in config["trainer"]["callbacks"] if c["class_path"].startswith("lightning_fl.callbacks.")]
            names = [c["class_path"].rpartition(".")[2] for c in ours]
            expected = AGGREGATION[method]
            assert names == ["FairnessMetrics", "RoundsToTarget"] + ([expected] if expected else []), method
            for callback in ours:  # the arguments are the callbacks' own (a typo would fail here)
                getattr(callbacks, callback["class_path"].rpartition(".")[2])(**callback.get("init_args", {}))
            assert ours[0]["init_args"]["evaluate_last_rounds"] is True
            assert config["model"]["clients_per_round"] == (3 if scale == "smoke" else 10)


def test_claims_carry_table_2s_numbers() -> None:
    e1 = [c for c in PAPER.claims if c.setting == "Fashion-MNIST rho=0.1, E=1 (paper: CIFAR-10)"]
    assert [c.text for c in e1] == ["IGFL accuracy > FedAvg", "IGFL accuracy > FedProx", "IGFL-C accuracy > FedAvg"]
    # Table 2, rho = 0.1, E = 1: IGFL 79.45 - FedAvg 68.62 = 10.83; IGFL-C 78.71 - 68.62 = 10.09; no FedProx column.
    assert [c.paper_gap for c in e1] == [pytest.approx(10.83), None, pytest.approx(10.09)]
    e5 = [c for c in PAPER.claims if c.setting == "CIFAR-10 rho=0.1, E=5"]
    assert [c.paper_gap for c in e5] == [pytest.approx(76.38 - 63.67), None, pytest.approx(72.31 - 63.67)]


def test_cifar10_settings_only_with_its_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the configs read data/ from the working directory
    fashion = ["Fashion-MNIST rho=0.1, E=1 (paper: CIFAR-10)", "Fashion-MNIST rho=0.1, E=5 (paper: CIFAR-10)"]
    assert not cifar10_present() and [s.name for s in PAPER.settings("paper")] == fashion
    (tmp_path / "data" / "cifar10").mkdir(parents=True)
    (tmp_path / "data" / "cifar10" / "cifar-10-python.tar.gz").write_bytes(b"")
    assert [s.name for s in PAPER.settings("paper")] == [*fashion, "CIFAR-10 rho=0.1, E=1", "CIFAR-10 rho=0.1, E=5"]
    cifar = PAPER.settings("paper")[2]
    assert cifar.common["data.class_path"] == "lightning_fl.datamodules.CIFAR10DataModule"
    assert [s.name for s in PAPER.settings("small")] == fashion[:1]  # small stays on Fashion-MNIST
