"""Every paper's reproduction end to end in its smoke setting: the pipeline and its files, not the paper."""

from __future__ import annotations

from functools import partial

import pytest

from lightning_fl.experiments.runs import Run, launch
from lightning_fl.reproduce.__main__ import PAPERS, load_paper, main
from lightning_fl.reproduce.runner import reproduce
from tests.conftest import run_cli


def _train_in_process(run: Run) -> int:
    return run_cli(*run.command[2:])  # drop "-m lightning_fl"


@pytest.mark.parametrize("key", PAPERS)
def test_smoke_reproduction_writes_its_report(key: str, tmp_path) -> None:
    paper = load_paper(key)
    report, verdicts = reproduce(paper, "smoke", [0], tmp_path / "runs", tmp_path / "docs", jobs=1,
                                 launcher=partial(launch, train=partial(_train_in_process)))
    assert (tmp_path / "docs" / f"{key}.md").read_text() == report == (tmp_path / "runs" / "report.md").read_text()
    for setting in paper.settings("smoke"):
        folder = tmp_path / "runs" / setting.folder
        for name in ("comparison.md", "evaluations.csv", "summary.csv", "runs.csv", "curves.png"):
            assert (folder / name).is_file(), name
        assert f"### {setting.name}" in report
        expected = [c for c in paper.claims if c.setting == setting.name and {c.ours, c.baseline} <= set(setting.reported)]
        assert [v.claim for v in verdicts if v.claim.setting == setting.name] == expected
    # One seed gives no interval: a claim can at most hold in direction.
    assert verdicts and all(v.verdict == "not reproduced" or v.reason == "one seed: no interval" for v in verdicts)


def test_bad_arguments_are_one_line(capsys) -> None:
    assert main(["--paper", "fedavg"]) == 2
    assert capsys.readouterr().err.strip() == f"error: paper must be one of {', '.join(PAPERS)}; got 'fedavg'"
    assert main(["--paper", "fedfa", "--scale", "huge"]) == 2
    assert capsys.readouterr().err.strip() == "error: scale must be one of small, paper, smoke; got 'huge'"
