"""pFedMe's reproduction: best-round (test_optimistic) and last-round metrics, claims across two metrics, configs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from torch.utils.tensorboard import SummaryWriter

from lightning_fl.experiments.runs import Run
from lightning_fl.reproduce.claims import Claim, judge
from lightning_fl.reproduce.paper import SettingResults
from lightning_fl.reproduce.pfedme import DNN, FEDAVG, GLOBAL_TAG, METRICS, MLR, PAPER, PFEDME, THETA
from lightning_fl.reproduce.report import verdict_table
from lightning_fl.reproduce.settings import apply_changes


def _results(tmp_path: Path) -> SettingResults:
    curves = {PFEDME: {1: 0.80, 2: 0.84, 3: 0.83}, FEDAVG: {1: 0.50, 2: 0.70, 3: 0.65}}
    rows = [(f"{m}/seed_0", m, 0, r, stage, "acc_pooled", acc if stage == "test" else 0.0)
            for m, curve in curves.items() for r, acc in curve.items() for stage in ("test", "val")]
    runs = [Run(m, 0, tmp_path / m, ()) for m in curves]
    with SummaryWriter(str(tmp_path / PFEDME)) as writer:  # what PFedMe logs at every test evaluation
        for step, value in {1: 0.6, 2: 0.75, 3: 0.7}.items():
            writer.add_scalar(GLOBAL_TAG, value, step)
    [setting] = [s for s in PAPER.settings("small") if s.name == MLR]
    return SettingResults(setting, [0], rows, runs)


def test_best_and_last_rounds_of_the_personal_and_global_models(tmp_path) -> None:
    results = _results(tmp_path)
    value = {key: metric.value for key, metric in METRICS.items()}
    assert value["pm"](results, PFEDME, 0) == pytest.approx(84.0)  # the best round
    assert value["pm_last"](results, PFEDME, 0) == pytest.approx(83.0)
    assert value["gm"](results, PFEDME, 0) == pytest.approx(75.0)  # from the logged scalar
    assert value["gm_last"](results, PFEDME, 0) == pytest.approx(70.0)
    assert value["gm"](results, FEDAVG, 0) == pytest.approx(70.0)  # FedAvg's evaluated model is its global one
    with pytest.raises(KeyError):
        value["pm"](results, FEDAVG, 0)


def test_a_claim_may_read_another_metric_for_its_baseline() -> None:
    claim = Claim(MLR, PFEDME, PFEDME, "pm", True, "Table 1 (ordering)", baseline_metric="gm")
    assert claim.against == "gm" and claim.text == "pFedMe pm > pFedMe gm"
    table = verdict_table(PAPER, [judge(claim, [84.0, 83.0, 85.0], [75.0, 74.0, 76.0])])
    assert "pFedMe (PM test_optimistic (%)) higher than pFedMe (GM test_optimistic (%))" in table
    assert all(c.paper_ours is None for c in PAPER.claims)  # unverified numbers: orderings only


def test_configs_follow_the_authors_settings() -> None:
    base = yaml.safe_load((Path(__file__).resolve().parents[2] / "configs/personalization/pfedme_synthetic.yaml").read_text())
    settings = {s.name: s for s in PAPER.settings("small")}
    for name, lam, fedavg_lr in ((MLR, 20.0, 0.02), (DNN, 30.0, 0.03)):
        setting = settings[name]
        configs = {m: apply_changes(base, {**setting.common, **setting.changes.get(m, {})}) for m in setting.methods}
        pfedme = configs[PFEDME]["trainer"]["callbacks"][0]["init_args"]
        assert pfedme["lam"] == lam and pfedme["all_clients_train"] and pfedme["evaluate"] == "w_loc"
        assert configs[THETA]["trainer"]["callbacks"][0]["init_args"]["evaluate"] == "theta"
        classes = [c["class_path"].rpartition(".")[2] for c in configs[FEDAVG]["trainer"]["callbacks"]]
        assert "PFedMe" not in classes
        assert configs[FEDAVG]["trainer"]["callbacks"][-1]["init_args"] == {"local_steps": 20}
        assert configs[FEDAVG]["model"]["optimizer"]["init_args"]["lr"] == fedavg_lr
        assert configs[FEDAVG]["model"]["eval"]["model"] == "global"
        hidden = configs[PFEDME]["model"]["client"]["init_args"].get("hidden")
        assert hidden == ([20] if name == DNN else None)


def test_one_primary_claim_per_setting_pm_against_fedavg() -> None:
    primary = [(c.setting, c.ours, c.metric, c.baseline, c.against) for c in PAPER.claims if c.primary]
    assert primary == [(MLR, PFEDME, "pm", FEDAVG, "gm"), (DNN, PFEDME, "pm", FEDAVG, "gm")]
