"""Every paper's reproduction end to end in its smoke setting: the pipeline and its files, not the paper."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from lightning_fl.experiments.launcher import launch
from lightning_fl.experiments.runs import FINISHED, Run
from lightning_fl.reproduce.__main__ import PAPERS, load_paper, main
from lightning_fl.reproduce.claims import DIRECTION_ONLY, INCONCLUSIVE, NOT_TESTABLE
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
    # One seed gives no interval: a claim can at most hold in direction (or the runs are identical).
    assert verdicts and all(v.reason == "one seed: no interval" and v.verdict in (DIRECTION_ONLY, INCONCLUSIVE)
                            or v.verdict == NOT_TESTABLE for v in verdicts)
    assert report.index("## Reviewer's checklist") < report.index("**Verdicts on the paper's") < report.index("## Claims")


def test_bad_arguments_are_one_line(capsys) -> None:
    assert main(["--paper", "fedavg"]) == 2
    assert capsys.readouterr().err.strip() == f"error: paper must be one of {', '.join(PAPERS)}; got 'fedavg'"
    assert main(["--paper", "fedfa", "--scale", "huge"]) == 2
    assert capsys.readouterr().err.strip() == "error: scale must be one of small, paper, smoke; got 'huge'"


def test_a_tuned_reproduction_tunes_its_methods_on_validation_with_one_budget(tmp_path) -> None:
    paper = load_paper("fedfa")
    [setting] = paper.settings("smoke")
    last = list(setting.methods if setting.tuned_methods is None else setting.tuned_methods)[-1]

    def train(run: Run) -> int:  # the last method's first trial fails on one seed, as a diverged run does
        return 1 if run.method == f"{last}/trial_0" and run.seed == 1001 else _train_in_process(run)

    report, _ = reproduce(paper, "smoke", [0], tmp_path / "runs", None, jobs=1, tune=True, trials=2,
                          launcher=partial(launch, train=train))
    folder = tmp_path / "runs" / setting.folder
    tuning = json.loads((folder / "tuning.json").read_text())
    tuned = list(setting.methods if setting.tuned_methods is None else setting.tuned_methods)
    assert list(tuning["methods"]) == tuned and tuning["seeds"] == [1000, 1001]  # never the reporting seed 0
    for method in tuned:
        assert len(tuning["methods"][method]["trials"]) == 2
        assert sorted(p.name for p in (folder / "tuning" / method).glob("trial_*/seed_*")) == \
            ["seed_1000", "seed_1000", "seed_1001", "seed_1001"]
    lr = tuning["methods"][tuned[0]]["selected"]["client_lr"]
    assert f"Selected on the validation splits: {tuned[0]} client_lr={lr:.3g}" in report
    assert "2 trials x 2 seeds (1000, 1001) per method" in report
    assert report.count("Trials that failed") == 1 and f"selects among fewer points): {last} 1 of 2." in report
    runs = {(r["method"], Path(r["config"]).parent.name) for r in _run_configs(folder)}
    assert runs == {(m, "tuned" if m in tuned else "configs") for m in setting.methods}


def _run_configs(folder: Path) -> list[dict]:
    """Each finished run's method and the config its command trained."""
    out = []
    for marker in folder.glob(f"*/seed_0/{FINISHED}"):
        command = json.loads(marker.read_text())["command"]
        out.append({"method": marker.parent.parent.name, "config": command[command.index("--config") + 1]})
    return out
