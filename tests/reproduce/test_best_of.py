"""Best-of pseudo-methods (a baseline at its best setting per seed): values, report rows, bad settings."""

from __future__ import annotations

import pytest

from lightning_fl.faults.validation import ConfigError
from lightning_fl.reproduce.paper import Metric, Paper, SettingResults, best_of_values
from lightning_fl.reproduce.report import setting_table
from lightning_fl.reproduce.settings import Setting

SETTING = Setting("s", {"Ours": "o.yaml", "B4": "b4.yaml", "B8": "b8.yaml"}, best_of={"B-best": ["B4", "B8"]})
METRICS = {"time": Metric("Time (s)", lambda r, m, s: 0.0, digits=1, higher_is_better=False),
           "acc": Metric("Accuracy (%)", lambda r, m, s: 0.0, digits=1)}


def test_best_is_per_seed_and_per_metric_direction() -> None:
    values = {("B4", "time"): [10.0, 30.0, 20.0], ("B8", "time"): [12.0, 25.0, 20.0],
              ("B4", "acc"): [70.0, 60.0, 65.0], ("B8", "acc"): [69.0, 62.0, 66.0], ("Ours", "acc"): [1.0, 1.0, 1.0]}
    # time: lower is better -> min(10, 12), min(30, 25), min(20, 20); accuracy: max(70, 69), max(60, 62), max(65, 66)
    assert best_of_values(SETTING, METRICS, values) == {("B-best", "time"): [10.0, 25.0, 20.0],
                                                        ("B-best", "acc"): [70.0, 62.0, 66.0]}


def test_a_metric_a_member_lacks_is_left_out() -> None:
    assert best_of_values(SETTING, METRICS, {("B4", "time"): [1.0], ("B4", "acc"): [2.0], ("B8", "acc"): [3.0]}) == {
        ("B-best", "acc"): [3.0]}


def test_the_report_has_a_row_and_a_note_for_the_pseudo_method() -> None:
    paper = Paper("p", "P", "", lambda scale: [SETTING], METRICS, [], paper_values={("s", "B-best", "time"): 9.5})
    results = SettingResults(SETTING, [0, 1], [], [])
    values = {("Ours", "time"): [1.0, 3.0], ("B4", "time"): [4.0, 6.0], ("B8", "time"): [5.0, 5.0]}
    table = setting_table(paper, results, values | best_of_values(SETTING, paper.metrics, values))
    # B-best per seed: min(4, 5) = 4, min(6, 5) = 5 -> mean 4.5, sample std sqrt(((4-4.5)^2 + (5-4.5)^2) / 1) = 0.7
    assert "| B-best | 9.5 \\| 4.5 ± 0.7 |" in table
    assert "B-best: per seed and column, the best of B4, B8" in table


@pytest.mark.parametrize("best_of", [{"Ours": ["B4"]}, {"B-best": ["B4", "B6"]}, {"B-best": []}])
def test_bad_best_of_is_one_line(best_of) -> None:
    with pytest.raises(ConfigError, match="^best_of.(Ours|B-best): must be a new name over methods of the setting"):
        Setting("s", {"Ours": "o.yaml", "B4": "b4.yaml"}, best_of=best_of)
