"""IGFL's reproduction: the last-10%-of-rounds metric by hand, the derived configs, Table 2's claims."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import SimpleNamespace

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


#: Table 2 (cross-device, CIFAR-10), the rho = 0.1 column, read off the paper for this test (SCAFFOLD: "–").
TABLE2 = {1: {"FedAvg": 68.62, "FedAvgM": 70.12, "FedAdam": 72.21, "IGFL-C": 78.71, "IGFL-S": 73.09, "IGFL": 79.45},
          5: {"FedAvg": 63.67, "FedAvgM": 67.10, "FedAdam": 67.07, "IGFL-C": 72.31, "IGFL-S": 66.79, "IGFL": 76.38}}
E1 = "Fashion-MNIST rho=0.1, E=1 (paper: CIFAR-10)"
SETTINGS = {E1: 1, "Fashion-MNIST rho=0.1, E=5 (paper: CIFAR-10)": 5, "CIFAR-10 rho=0.1, E=1": 1,
            "CIFAR-10 rho=0.1, E=5": 5}


def _pair(claim) -> tuple[str, str]:
    """The claim's two methods, the proposed one first (whichever way the claim points)."""
    proposed = ("IGFL", "IGFL-C", "IGFL-S")
    return (claim.ours, claim.baseline) if claim.ours in proposed and (
        claim.baseline not in proposed or claim.ours == "IGFL") else (claim.baseline, claim.ours)


def test_every_comparison_of_table_2_is_a_claim_with_the_papers_numbers() -> None:
    # Per setting: IGFL against FedAvg, FedAvgM, FedAdam, IGFL-C, IGFL-S (5); IGFL-C and IGFL-S each against
    # FedAvg, FedAvgM, FedAdam (6): 11 the paper makes, and IGFL against FedProx, which it does not. 4 settings.
    assert len(PAPER.claims) == 48 and sum(c.in_paper for c in PAPER.claims) == 44
    for name, epochs in SETTINGS.items():
        claims = [c for c in PAPER.claims if c.setting == name]
        expected = [("IGFL", m) for m in ("FedAvg", "FedAvgM", "FedAdam", "IGFL-C", "IGFL-S")]
        expected += [(p, m) for p in ("IGFL-C", "IGFL-S") for m in ("FedAvg", "FedAvgM", "FedAdam")]
        assert [_pair(c) for c in claims if c.in_paper] == expected
        [apart] = [c for c in claims if not c.in_paper]
        assert (apart.ours, apart.baseline, apart.paper_baseline) == ("IGFL", "FedProx", None)
        for c in claims:
            assert c.metric == "accuracy" and c.higher_is_better and c.form == "better"
            assert c.paper_ours == TABLE2[epochs][c.ours]
            if c.in_paper:
                assert c.paper_baseline == TABLE2[epochs][c.baseline]
                assert c.paper_ours > c.paper_baseline, c.text  # the printed direction
                assert c.source == f"Table 2 (CIFAR-10, rho = 0.1, E = {epochs})"
    # The printed direction by hand: at E = 5 IGFL-S (66.79) is behind FedAvgM (67.10) and FedAdam (67.07).
    e5 = [c for c in PAPER.claims if c.setting == "Fashion-MNIST rho=0.1, E=5 (paper: CIFAR-10)"]
    assert {(c.ours, c.baseline) for c in e5 if c.ours in ("FedAvgM", "FedAdam")} == {
        ("FedAvgM", "IGFL-S"), ("FedAdam", "IGFL-S")}
    assert [c.paper_gap for c in e5 if c.ours == "FedAvgM"] == [pytest.approx(67.10 - 66.79)]
    e1 = [c for c in PAPER.claims if c.setting == E1]
    assert all(c.ours in ("IGFL", "IGFL-C", "IGFL-S") for c in e1)
    # E = 1: IGFL 79.45 - FedAvg 68.62 = 10.83 ("nearly 13%" is E = 5: 76.38 - 63.67 = 12.71).
    assert e1[0].text == "IGFL accuracy > FedAvg" and e1[0].paper_gap == pytest.approx(10.83)
    assert e5[0].paper_gap == pytest.approx(12.71)


def test_the_primary_claim_is_igfl_against_the_stronger_of_fedavgm_and_fedadam() -> None:
    # E = 1: FedAdam 72.21 > FedAvgM 70.12; E = 5: FedAvgM 67.10 > FedAdam 67.07.
    primary = {c.setting: (c.ours, c.baseline, c.paper_gap) for c in PAPER.claims if c.primary}
    assert primary == {name: ("IGFL", "FedAdam" if e == 1 else "FedAvgM",
                              pytest.approx(79.45 - 72.21 if e == 1 else 76.38 - 67.10))
                       for name, e in SETTINGS.items()}


@pytest.mark.parametrize("scale", ["smoke", "small", "paper"])
def test_every_method_is_selected_on_the_pooled_accuracy_and_the_headline_runs(scale: str) -> None:
    for setting in PAPER.settings(scale):
        assert setting.objectives == {m: "val/acc_pooled" for m in setting.methods}
        assert {"FedAvg", "FedAdam", "IGFL"} <= set(setting.methods)
        if scale != "smoke":  # every method of Table 2's rho = 0.1 column, and FedProx
            assert set(setting.methods) == {"FedAvg", "FedAvgM", "FedAdam", "FedProx", "IGFL-C", "IGFL-S", "IGFL"}
    [smoke] = PAPER.settings("smoke")
    judged = [c for c in PAPER.claims if c.setting == smoke.name and {c.ours, c.baseline} <= set(smoke.methods)]
    assert [c.text for c in judged] == ["IGFL accuracy > FedAvg", "IGFL accuracy > FedAdam"]
    assert "2 of the E = 1 setting's claims are judged" in PAPER.not_run("smoke")[0]
    assert any("SCAFFOLD" in line for line in PAPER.not_run("paper"))


def test_discussion_reports_the_measured_gap_and_who_was_tuned() -> None:
    [claim] = [c for c in PAPER.claims if c.setting == E1 and c.primary]
    [apart] = [c for c in PAPER.claims if c.setting == E1 and not c.in_paper]
    verdicts = [SimpleNamespace(claim=claim, verdict="inconclusive"), SimpleNamespace(claim=apart, verdict="contradicted")]
    values = {(E1, "IGFL", "accuracy"): [70.0, 72.0], (E1, "FedAdam", "accuracy"): [71.0, 71.5],
              (E1, "FedProx", "accuracy"): [80.0, 80.0]}
    text = PAPER.discussion(verdicts, values, {E1: {"FedAdam": "client_lr=0.03,server_lr=0.01"}})
    # IGFL 71.00, FedAdam 71.25: -0.25 points where the paper has 79.45 - 72.21 = +7.24; FedProx's claim is
    # not the paper's, so it is not discussed.
    assert text.startswith("Primary: IGFL against FedAdam on Fashion-MNIST rho=0.1, E=1 (paper: CIFAR-10): 71.00%"
                           " against 71.25%, a gap of -0.25 points where the paper has +7.24 (inconclusive);"
                           " FedAdam runs at the client_lr=0.03,server_lr=0.01 its validation splits selected,"
                           " while IGFL keeps the configs' lr 0.03")
    assert "FedProx" not in text
    assert PAPER.discussion([SimpleNamespace(claim=claim, verdict="reproduced")], values, {}) == ""


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
