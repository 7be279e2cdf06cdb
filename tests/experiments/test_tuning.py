"""Fair baselines: the grids, the derived configs, and a selection that reads validation scores only."""

from __future__ import annotations

import json
import math
from functools import partial
from pathlib import Path

import pytest
import yaml

from lightning_fl.experiments import tuning
from lightning_fl.experiments.launcher import launch
from lightning_fl.experiments.runs import Run
from lightning_fl.faults.validation import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
FEDPROX, FEDAVG, FEDFA = (str(CONFIGS / f"{n}_synthetic.yaml") for n in ("fedprox", "fedavg", "fedfa"))


def test_each_method_gets_its_grid_and_the_settings_land_in_the_config(tmp_path):
    points = tuning.grid_for(FEDPROX)
    assert tuning.aggregation_of(FEDPROX) == "FedProx" and len(points) == 4 * 4  # client lr x mu
    assert points[0] == {"client_lr": 0.003, "mu": 0.001} and points[-1] == {"client_lr": 0.1, "mu": 1.0}
    assert tuning.aggregation_of(FEDFA) is None and tuning.grid_for(FEDFA) == [{"client_lr": lr} for lr in
                                                                               (0.003, 0.01, 0.03, 0.1)]
    path = tuning.write_point_config(FEDPROX, {"client_lr": 0.03, "mu": 0.1}, tmp_path / "p.yaml")
    written = yaml.safe_load(path.read_text())
    assert written["model"]["optimizer"]["init_args"]["lr"] == 0.03
    [fedprox] = [c for c in written["trainer"]["callbacks"] if c["class_path"] == "lightning_fl.callbacks.FedProx"]
    assert fedprox["init_args"]["mu"] == 0.1
    assert written["data"] == yaml.safe_load(Path(FEDPROX).read_text())["data"]  # nothing else changes


def _closeness(lr: float, mu: float) -> float:
    # Peaks at client lr 0.01 and mu 0.1 (the "validation" optimum of the fake runs).
    return 0.5 - (math.log10(lr) + 2) ** 2 - (math.log10(mu) + 1) ** 2


def _fake_train(run: Run, fail_lr: float | None = None) -> int:
    """Writes a fairness history whose test ranking is the reverse of the validation ranking."""
    config = yaml.safe_load(Path(run.config).read_text())
    lr = config["model"]["optimizer"]["init_args"]["lr"]
    mus = [c.get("init_args", {}).get("mu", 1.0) for c in config["trainer"]["callbacks"] if "FedProx" in c["class_path"]]
    if lr == fail_lr:
        return 1  # e.g. a diverged setting
    val = _closeness(lr, mus[0] if mus else 1.0)
    lines = ["stage,round,acc_mean"]
    lines += [f"val,1,{-val!r}", f"test,1,{val!r}"]  # round 1 ranks the other way: only the final round counts
    lines += [f"val,2,{val!r}", f"test,2,{-val!r}"]
    (run.log_dir / "fairness_history.csv").write_text("\n".join(lines) + "\n")
    return 0


def test_selection_takes_the_best_final_validation_score_and_ignores_test(tmp_path):
    selected, report = tuning.tune({"FedProx": FEDPROX, "FedAvg": FEDAVG}, tmp_path, seed=7, jobs=1,
                                   launcher=partial(launch, train=partial(_fake_train, fail_lr=0.1)))
    result = json.loads((tmp_path / "tuning.json").read_text())
    assert result["metric"] == "val/acc_mean" and result["seed"] == 7
    fedprox = result["methods"]["FedProx"]
    assert fedprox["selected"] == {"client_lr": 0.01, "mu": 0.1}  # the validation optimum; test would pick the worst
    scores = {tuning.point_label(e["setting"]): e["score"] for e in fedprox["grid"]}
    assert scores["client_lr=0.01,mu=0.1"] == pytest.approx(0.5) and scores["client_lr=0.003,mu=0.001"] == \
        pytest.approx(_closeness(0.003, 0.001))
    assert scores["client_lr=0.1,mu=1"] is None  # failed: recorded, never selected
    # FedAvg (lr grid only; the fake gives it mu = 1): the best lr is 0.01.
    assert result["methods"]["FedAvg"]["selected"] == {"client_lr": 0.01}
    tuned = yaml.safe_load(Path(selected["FedProx"]).read_text())
    assert tuned["model"]["optimizer"]["init_args"]["lr"] == 0.01
    assert Path(selected["FedProx"]) == tmp_path / "tuned" / "FedProx.yaml"
    assert "| **client_lr=0.01,mu=0.1** | **0.5000** |" in report and "| client_lr=0.1,mu=1 | failed |" in report
    assert (tmp_path / "tuning.md").read_text() == report
    # Every selection run used the selection seed.
    assert sorted(p.name for p in (tmp_path / "tuning" / "FedAvg").glob("*/seed_*")) == ["seed_7"] * 4


def _must_not_train(run: Run) -> float:
    raise AssertionError(f"{run.name} trained")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"methods": {"FedAvg": FEDAVG}, "metric": "test/acc_mean"}, "tune metric must be one of val/acc_mean,"),
    ({"methods": {"Drop": str(CONFIGS / "stragglers" / "fedavg_drop.yaml")}},
     "--tune: data.init_args.val_fraction of Drop"),
])
def test_bad_tuning_input_fails_before_training(tmp_path, kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        tuning.tune(save_dir=tmp_path, seed=0, launcher=_must_not_train, **kwargs)


def test_staged_search_tunes_the_reference_lr_then_each_methods_own_parameters(tmp_path):
    # FedAvg (the reference) searches the client lr: the fake's optimum 0.01. FedProx then searches only mu at
    # lr 0.01 (4 runs, not 16); FedFa has no parameter of its own, so it takes lr 0.01 without a run.
    selected, report = tuning.tune({"FedAvg": FEDAVG, "FedProx": FEDPROX, "FedFa": FEDFA}, tmp_path, seed=3, jobs=1,
                                   launcher=partial(launch, train=_fake_train), reference="FedAvg")
    result = json.loads((tmp_path / "tuning.json").read_text())
    assert result["reference"] == "FedAvg" and list(result["methods"]) == ["FedAvg", "FedProx", "FedFa"]
    assert result["methods"]["FedAvg"]["selected"] == {"client_lr": 0.01}
    fedprox = result["methods"]["FedProx"]
    assert [e["setting"] for e in fedprox["grid"]] == [{"client_lr": 0.01, "mu": mu} for mu in (0.001, 0.01, 0.1, 1.0)]
    assert fedprox["selected"] == {"client_lr": 0.01, "mu": 0.1}
    assert result["methods"]["FedFa"]["grid"] == [{"setting": {"client_lr": 0.01}, "score": None}]
    trained = sorted(p.parent.relative_to(tmp_path / "tuning").as_posix() for p in (tmp_path / "tuning").glob("*/*/seed_3"))
    assert trained == [f"FedAvg/client_lr={lr:g}" for lr in (0.003, 0.01, 0.03, 0.1)] + \
        [f"FedProx/client_lr=0.01,mu={mu:g}" for mu in (0.001, 0.01, 0.1, 1.0)]
    assert yaml.safe_load(Path(selected["FedFa"]).read_text())["model"]["optimizer"]["init_args"]["lr"] == 0.01
    assert "| **client_lr=0.01** | **not run** |" in report and "Staged: FedAvg selected the client lr" in report
    # lr 0.01 is inside 0.003..0.1 and mu 0.1 inside 0.001..1: no edge warning; FedFa tried one lr only.
    assert "edge of the grid" not in report


@pytest.mark.parametrize(("selected", "edges"), [
    ({"client_lr": 0.003, "mu": 1.0}, ["client_lr", "mu"]),  # both at an end of what was tried
    ({"client_lr": 0.03, "mu": 0.01}, []),  # both inside
    ({"client_lr": 0.1, "mu": 0.1}, ["client_lr"]),
])
def test_a_selection_at_the_end_of_its_grid_is_flagged(selected, edges):
    grid = tuning.grid_for(FEDPROX)  # lr 0.003..0.1 x mu 0.001..1
    assert tuning.at_grid_edge(selected, grid) == edges
    assert tuning.at_grid_edge({"client_lr": 0.01}, [{"client_lr": 0.01}]) == []  # one value tried: no edge


def test_a_staged_reference_must_be_one_of_the_methods(tmp_path):
    with pytest.raises(ConfigError, match="tune reference must be one of FedProx; got 'FedAvg'"):
        tuning.tune({"FedProx": FEDPROX}, tmp_path, seed=0, launcher=_must_not_train, reference="FedAvg")
