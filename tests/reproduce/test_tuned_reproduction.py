"""A reproduction tunes every method with one budget at SCALE=small and nothing at SCALE=paper unless asked."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from lightning_fl.experiments.launcher import launch
from lightning_fl.reproduce.paper import Metric, Paper
from lightning_fl.reproduce.runner import reproduce, tunes_by_default
from lightning_fl.reproduce.settings import Setting
from tests.experiments.test_tuning import _fake_train

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
FEDAVG, FEDPROX = str(CONFIGS / "fedavg_synthetic.yaml"), str(CONFIGS / "fedprox_synthetic.yaml")


def _paper(tuned_methods=None, changes=None) -> Paper:
    setting = Setting("S", {"FedAvg": FEDAVG, "FedProx": FEDPROX}, {"trainer.max_epochs": 2}, changes or {},
                      tuned_methods=tuned_methods, objectives={"FedProx": "val/acc_worst20"})
    accuracy = Metric("Accuracy", lambda results, method, seed: results.final(method, seed, "acc_mean"))
    return Paper("fake", "A fake paper", "Two methods.", lambda scale: [setting], {"acc": accuracy}, [])


@pytest.mark.parametrize(("scale", "tune", "expected"), [("small", None, True), ("paper", None, False),
                                                          ("smoke", None, False), ("paper", True, True)])
def test_small_tunes_by_default_and_paper_only_when_asked(scale, tune, expected):
    assert (tunes_by_default(scale) if tune is None else tune) is expected


def test_every_method_is_tuned_with_the_same_budget_and_the_report_says_so(tmp_path):
    report, _ = reproduce(_paper(), "small", [0, 1], tmp_path, None, jobs=1, trials=2,
                          launcher=partial(launch, train=_fake_train))
    assert ("2 trials x 2 seeds (1000, 1001) per method, on tuning seeds no reported run uses, each selected on its"
            " objective: val/acc_mean (FedAvg), val/acc_worst20 (FedProx)") in report
    assert "Every method was tuned, the paper's own included." in report
    assert "Selected on the validation splits: FedAvg client_lr=" in report and "; FedProx client_lr=" in report
    trials = sorted(p.name for p in (tmp_path / "s" / "tuning").glob("*/trial_*"))
    assert trials == ["trial_0", "trial_0", "trial_1", "trial_1"]


def test_a_setting_may_tune_only_some_methods_and_paper_scale_tunes_nothing(tmp_path):
    report, _ = reproduce(_paper(["FedProx"]), "small", [0], tmp_path / "some", None, jobs=1, trials=1,
                          launcher=partial(launch, train=_fake_train))
    assert "Not tuned (the setting lists only some methods, or the method keeps no validation splits; they run at the" \
        " config's values): FedAvg (S)." in report
    report, _ = reproduce(_paper(), "paper", [0], tmp_path / "paper", None, jobs=1,
                          launcher=partial(launch, train=_fake_train))
    assert "nothing tuned" in report and not (tmp_path / "paper" / "s" / "tuning").exists()


def test_by_default_a_method_without_validation_splits_is_not_tuned(tmp_path):
    paper = _paper(changes={"FedAvg": {"data.init_args.val_fraction": 0.0}})
    fake = partial(launch, train=_fake_train)
    report, _ = reproduce(paper, "small", [0], tmp_path, None, jobs=1, trials=1, launcher=fake)
    assert "keeps no validation splits; they run at the config's values): FedAvg (S)." in report
    assert [p.name for p in (tmp_path / "s" / "tuning").iterdir() if p.name != "configs"] == ["FedProx"]
    every = _paper(changes={m: {"data.init_args.val_fraction": 0.0} for m in ("FedAvg", "FedProx")})
    report, _ = reproduce(every, "small", [0], tmp_path / "none", None, jobs=1, launcher=fake)
    assert "Hyperparameters: nothing tuned: no method here can be" in report


def test_a_bad_trial_count_is_one_line(capsys):
    from lightning_fl.reproduce.__main__ import main

    assert main(["--paper", "fedfa", "--trials", "0"]) == 2
    assert capsys.readouterr().err.strip() == "error: trials must be an integer >= 1; got 0"
