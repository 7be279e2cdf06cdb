"""Equal-budget tuning: same trials and seeds per method, validation rows only, widening, pruning, determinism.

The fake runs write a fairness history whose validation score is a known function of the trial's
parameters (worked out here, not by the tuner) and whose test rows rank the other way.
"""

from __future__ import annotations

import json
import math
import re
from functools import partial
from pathlib import Path

import pytest
import yaml

from lightning_fl.experiments import tuning
from lightning_fl.experiments.launcher import launch
from lightning_fl.experiments.optuna_search import best_trial, stage_sizes
from lightning_fl.experiments.runs import Run
from lightning_fl.experiments.search_space import Param, edges, space_for, widen, write_point_config
from lightning_fl.experiments.tuning_runs import common_steps, failure_reason
from lightning_fl.faults.validation import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
FEDPROX, FEDAVG, FEDFA = (str(CONFIGS / f"{n}_synthetic.yaml") for n in ("fedprox", "fedavg", "fedfa"))


def _params(run: Run) -> tuple[float, float | None]:
    config = yaml.safe_load(Path(run.config).read_text())
    mus = [c.get("init_args", {}).get("mu") for c in config["trainer"]["callbacks"] if "FedProx" in c["class_path"]]
    return config["model"]["optimizer"]["init_args"]["lr"], (mus[0] if mus else None)


def _val(lr: float, optimum: float) -> float:
    return 1.0 - (math.log10(lr) - math.log10(optimum)) ** 2


def _fake_train(run: Run, optimum: float = 0.01, seen: list | None = None, rounds: int = 2) -> int:
    """Val score peaks at client lr ``optimum``; the test rows rank the other way; seed 1001 scores 0.1 less."""
    lr, _ = _params(run)
    if seen is not None:
        seen.append((run.seed, lr))
    val = _val(lr, optimum) - (0.1 if run.seed == 1001 else 0.0)
    lines = ["stage,round,acc_mean,acc_var,acc_worst20"]
    for r in range(1, rounds + 1):
        lines += [f"val,{r},{val * r / rounds!r},{1 - val!r},{val / 2!r}", f"test,{r},{-val!r},{val!r},{-val!r}"]
    (run.log_dir / "fairness_history.csv").write_text("\n".join(lines) + "\n")
    return 0


def _tune(tmp_path, methods, **kwargs):
    kwargs.setdefault("launcher", partial(launch, train=_fake_train))
    return tuning.tune(methods, tmp_path, overrides=["--trainer.max_epochs", "2"], **kwargs)


def test_every_method_gets_the_same_trials_on_the_tuning_seeds_only(tmp_path):
    seen = []
    result = _tune(tmp_path, {"FedAvg": FEDAVG, "FedProx": FEDPROX, "FedFa": FEDFA}, trials=5,
                   launcher=partial(launch, train=partial(_fake_train, seen=seen)), reporting_seeds=[0, 1, 2])
    for method in ("FedAvg", "FedProx", "FedFa"):
        assert len(result.methods[method]["trials"]) == 5
        assert sorted(p.name for p in (tmp_path / "tuning" / method).glob("trial_*/seed_*")) == \
            sorted(["seed_1000", "seed_1001"] * 5)
    assert {seed for seed, _ in seen} == {1000, 1001} and len(seen) == 3 * 5 * 2
    data = json.loads((tmp_path / "tuning.json").read_text())
    assert data["seeds"] == [1000, 1001] and data["trials"] == 5
    assert "5 trials x 2 seeds (1000, 1001)" in (tmp_path / "tuning.md").read_text()
    # The score of a trial is the mean over the seeds of the final validation value (the fake's formula).
    complete = [t for t in result.methods["FedProx"]["trials"] if t["state"] == "complete"]
    assert len(complete) >= 3  # the pruner's startup trials at least
    for t in complete:
        expected = _val(t["params"]["client_lr"], 0.01) - 0.05
        assert t["score"] == pytest.approx(expected) and t["seed_scores"] == pytest.approx([expected + 0.05,
                                                                                              expected - 0.05])
    assert set(result.methods["FedProx"]["selected"]) == {"client_lr", "mu"}
    assert set(result.methods["FedFa"]["selected"]) == {"client_lr", "client_momentum", "server_momentum"}


def test_the_selection_reads_validation_rows_only_and_lands_in_the_tuned_config(tmp_path):
    result = _tune(tmp_path, {"FedAvg": FEDAVG}, trials=6)
    trials = result.methods["FedAvg"]["trials"]
    best = max(trials, key=lambda t: _val(t["params"]["client_lr"], 0.01))  # the best by the val formula
    assert result.methods["FedAvg"]["selected"] == best["params"]  # test rows (reversed) would pick the worst
    tuned = yaml.safe_load(Path(result.configs["FedAvg"]).read_text())
    assert tuned["model"]["optimizer"]["init_args"]["lr"] == best["params"]["client_lr"]
    assert Path(result.configs["FedAvg"]) == tmp_path / "tuned" / "FedAvg.yaml"
    assert tuned["data"] == yaml.safe_load(Path(FEDAVG).read_text())["data"]


def test_a_lower_is_better_objective_is_minimised(tmp_path):
    result = _tune(tmp_path, {"FedAvg": FEDAVG}, trials=4, objectives={"FedAvg": "val/acc_var"})
    r = result.methods["FedAvg"]
    assert r["metric"] == "val/acc_var" and not r["maximize"]
    assert r["score"] == min(t["score"] for t in r["trials"])  # acc_var = 1 - val: the best val score


def test_the_same_command_twice_gives_the_same_selections_and_trains_nothing_new(tmp_path):
    first = _tune(tmp_path / "a", {"FedProx": FEDPROX}, trials=6)
    again = _tune(tmp_path / "b", {"FedProx": FEDPROX}, trials=6)
    assert [t["params"] for t in first.methods["FedProx"]["trials"]] == \
        [t["params"] for t in again.methods["FedProx"]["trials"]]
    assert first.selected == again.selected

    def must_not_train(run: Run) -> int:
        raise AssertionError(f"{run.name} trained again")

    rerun = _tune(tmp_path / "a", {"FedProx": FEDPROX}, trials=6, launcher=partial(launch, train=must_not_train))
    assert rerun.selected == first.selected


def test_a_best_trial_at_the_edge_widens_the_space_and_the_total_stays_equal(tmp_path):
    # The optimum lr 5 lies far above the space (0.001..0.1): the best trial sits at the top edge.
    far = partial(launch, train=partial(_fake_train, optimum=5.0))
    result = _tune(tmp_path, {"FedAvg": FEDAVG}, trials=8, launcher=far)
    r = result.methods["FedAvg"]
    assert len(r["trials"]) == 8 and r["stages"] == [4, 2, 2]
    assert [w["after_stage"] for w in r["widenings"]] == [0, 1]  # both boundaries: the limit of 2
    assert r["widenings"][0]["ranges"]["client_lr"] == [[0.001, 0.1], [0.001, pytest.approx(1.0)]]
    assert r["widenings"][1]["ranges"]["client_lr"][1] == [0.001, pytest.approx(10.0)]  # 3 decades: +1.5, capped at 10
    assert all(t["params"]["client_lr"] <= 0.1 for t in r["trials"] if t["stage"] == 0)
    assert max(t["params"]["client_lr"] for t in r["trials"]) > 1.0  # the widened space was searched
    assert r["selected"]["client_lr"] > 1.0 and r["at_edge"] == {}  # inside 0.001..10 (the hard limit is 10)


def test_a_best_trial_still_at_the_edge_after_the_last_widening_is_flagged(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "space_for", lambda config: (Param("client_lr", 1e-3, 1e-1, hard_high=1e6),))
    beyond = partial(launch, train=partial(_fake_train, optimum=1e5))
    result = _tune(tmp_path, {"FedAvg": FEDAVG}, trials=8, launcher=beyond)
    r = result.methods["FedAvg"]
    # 0.001..0.1 -> ..1 -> ..31.6 (half of 3 decades), and the best is still at the top.
    assert r["space"]["client_lr"][:2] == [0.001, pytest.approx(10 ** 1.5)] and len(r["widenings"]) == 2
    assert r["at_edge"] == {"client_lr": "high"} and result.at_edge == {"FedAvg": ["client_lr"]}
    report = (tmp_path / "tuning.md").read_text()
    assert "**Flagged: still at the edge of its space: client_lr (high)** (the limit of widenings reached" in report


def test_a_best_trial_inside_the_space_is_not_widened(tmp_path):
    r = _tune(tmp_path, {"FedAvg": FEDAVG}, trials=8).methods["FedAvg"]  # optimum 0.01, the centre
    assert r["widenings"] == [] and r["space"]["client_lr"] == [0.001, 0.1, "log"] and r["at_edge"] == {}
    assert edges(best_trial(r["trials"], True)["params"], space_for(FEDAVG)) == {}


@pytest.mark.parametrize(("trials", "sizes"), [(6, [4, 1, 1]), (8, [4, 2, 2]), (12, [6, 3, 3]), (5, [3, 1, 1]),
                                               (3, [2, 1]), (1, [1])])
def test_the_budget_splits_into_a_first_stage_and_at_most_two_widening_stages(trials, sizes):
    assert stage_sizes(trials) == sizes and sum(sizes) == trials


@pytest.mark.parametrize(("value", "expected"), [
    (0.0011, {"p": "low"}),  # log position 0.02
    (0.0016, {}),  # log position 0.10...: inside (0.0015849 is exactly 0.1)
    (0.05, {}),
    (0.07, {"p": "high"}),  # log position 0.92
])
def test_edges_are_the_outer_tenth_of_a_log_range(value, expected):
    assert edges({"p": value}, [Param("p", 1e-3, 1e-1)]) == expected


def test_widening_moves_one_side_by_half_the_width_within_the_hard_limits():
    assert widen(Param("p", 1e-3, 1e-1), "low").low == pytest.approx(1e-4)
    momentum = Param("m", 0.0, 0.9, log=False, hard_high=0.99)
    assert widen(momentum, "high").high == pytest.approx(0.99)  # 0.9 + 0.45, capped
    assert edges({"m": 0.0}, [momentum]) == {}  # at its hard limit: the whole range is searched there
    assert edges({"m": 0.95}, [Param("m", 0.0, 0.99, log=False, hard_high=0.99)]) == {}


def test_pruning_stops_a_trial_whose_curve_is_below_the_median(tmp_path):
    # 8 rounds, evaluated every round; the pruner waits 3 complete trials and prunes from step 4 on (steps
    # below its warm-up, half of 8 rounds, are never pruned).
    def curves(run: Run) -> int:
        lr, _ = _params(run)
        good = lr > 0.004  # the fake's bad trials are those with a small lr
        lines = ["stage,round,acc_mean"] + [f"val,{r},{(0.1 if not good else 0.5) * r!r}" for r in range(1, 9)]
        (run.log_dir / "fairness_history.csv").write_text("\n".join(lines) + "\n")
        return 0

    result = tuning.tune({"FedAvg": FEDAVG}, tmp_path, trials=8, overrides=["--trainer.max_epochs", "8"],
                         launcher=partial(launch, train=curves))
    trials = result.methods["FedAvg"]["trials"]
    for t in trials[3:]:  # after the startup trials: a bad curve is pruned at round 4 (the first after warm-up)
        bad = t["params"]["client_lr"] <= 0.004
        assert (t["state"] == "pruned") == bad, t
        if bad:
            assert t["pruned_at"] == 4 and t["score"] is None
            assert t["steps"] == [(1, 0.1), (2, 0.2), (3, pytest.approx(0.3)), (4, 0.4)]
    assert all(t["state"] == "complete" for t in trials[:3])
    assert any(t["state"] == "pruned" for t in trials) and "pruned at round 4" in (tmp_path / "tuning.md").read_text()


def test_common_steps_average_the_rounds_every_seed_reached():
    assert common_steps([[(1, 0.2), (2, 0.4)], [(1, 0.6), (2, 0.0)]]) == [(1, pytest.approx(0.4)), (2, 0.2)]
    assert common_steps([[(1, 0.2), (2, 0.4)], []]) == []


def _must_not_train(run: Run) -> float:
    raise AssertionError(f"{run.name} trained")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"methods": {"FedAvg": FEDAVG}, "metric": "test/acc_mean"}, "tune metric must be one of val/acc_mean,"),
    ({"methods": {"FedAvg": FEDAVG}, "seeds": [1000]}, "tune seeds must be at least 2 distinct seeds"),
    ({"methods": {"FedAvg": FEDAVG}, "seeds": [0, 1], "reporting_seeds": [1, 2]}, "tune seeds must not be reporting"),
    ({"methods": {"FedAvg": FEDAVG}, "trials": 0}, "tune trials must be an integer >= 1; got 0"),
    ({"methods": {"FedAvg": FEDAVG}, "objectives": {"FedAvg": "val/loss"}}, "tune metric must be one of"),
    ({"methods": {"Drop": str(CONFIGS / "stragglers" / "fedavg_drop.yaml")}},
     "tune: data.init_args.val_fraction of Drop"),
])
def test_bad_tuning_input_fails_before_training(tmp_path, kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        tuning.tune(save_dir=tmp_path, launcher=_must_not_train, **kwargs)


def test_a_point_lands_in_the_optimizer_or_the_callback(tmp_path):
    path = write_point_config(FEDFA, {"client_lr": 0.03, "client_momentum": 0.7, "server_momentum": 0.2},
                              tmp_path / "p.yaml")
    written = yaml.safe_load(path.read_text())
    assert written["model"]["optimizer"]["init_args"] == {"lr": 0.03, "momentum": 0.7}
    [fedfa] = [c for c in written["trainer"]["callbacks"] if c["class_path"] == "lightning_fl.callbacks.FedFa"]
    assert fedfa["init_args"]["server_momentum"] == 0.2


def test_a_trial_whose_run_fails_is_recorded_and_never_selected(tmp_path):
    def diverges_at_large_lr(run: Run) -> int:
        if run.seed == 1001 and _params(run)[0] > 0.015:
            (run.log_dir / "train.log").write_text("round 1/2 (0.10 s)\nerror: round 2: client 3 diverged (train loss"
                                                   " nan); stopping before aggregation\nsome later line\n")
            return 1
        return _fake_train(run, optimum=0.1)

    result = _tune(tmp_path, {"FedAvg": FEDAVG}, trials=4, launcher=partial(launch, train=diverges_at_large_lr))
    r = result.methods["FedAvg"]
    failed = [t for t in r["trials"] if t["state"] == "failed"]
    assert failed and all(t["params"]["client_lr"] > 0.015 and t["score"] is None for t in failed)
    assert r["selected"]["client_lr"] <= 0.015  # the fake's optimum 0.1 failed: the best of the rest
    diverging = sum(t["params"]["client_lr"] > 0.015 for t in r["trials"])  # the fake's rule, not the states
    assert result.failed == {"FedAvg": f"{diverging} of 4"}
    # Why it failed, in one line: the log's error line, not the run directory.
    assert re.search(r"\| failed: FedAvg/trial_\d seed 1001 failed \(exit 1\): error: round 2: client 3 diverged"
                     r" \(train loss nan\); stopping before aggregation \|", (tmp_path / "tuning.md").read_text())


def test_a_running_or_pruned_runs_values_come_from_its_checkpoint_validation_rows_only(tmp_path):
    import torch

    from lightning_fl.experiments.runs import CHECKPOINT, STARTED, identity
    from lightning_fl.experiments.tuning_runs import val_series

    run = Run("A", 1000, tmp_path, ("-m", "lightning_fl", "fit", "--config", FEDAVG), FEDAVG)
    history = [{"stage": "val", "round": 2, "acc_mean": 0.25}, {"stage": "test", "round": 2, "acc_mean": 0.9},
               {"stage": "val", "round": 4, "acc_mean": 0.5}, {"stage": "test", "round": 4, "acc_mean": 0.1}]
    (tmp_path / CHECKPOINT).parent.mkdir(parents=True)
    torch.save({"callbacks": {"FairnessMetrics": {"server": {"history": history}}}}, tmp_path / CHECKPOINT)
    assert val_series(run, "val/acc_mean") == []  # no started.json of this run: not its checkpoint
    (tmp_path / STARTED).write_text(json.dumps(identity(run)))
    assert val_series(run, "val/acc_mean") == [(2, 0.25), (4, 0.5)]
    other = Run("A", 1000, tmp_path, ("-m", "lightning_fl", "fit", "--config", FEDPROX), FEDPROX)
    assert val_series(other, "val/acc_mean") == []  # an outdated attempt's rows are never replayed


def test_decided_trials_give_back_their_client_state_files(tmp_path):
    # model.client_state: disk keeps about 4 GB per IGFL run: a reproduction's tuning trials filled a disk.
    def with_state(run: Run) -> int:
        (run.log_dir / "client_state").mkdir()
        (run.log_dir / "client_state" / "IGFL.prev_delta.0.log").write_bytes(b"\0" * 1024)
        return 1 if run.seed == 1001 and _params(run)[0] > 0.015 else _fake_train(run, optimum=0.1)

    first = tmp_path / "tuning" / "FedAvg" / "trial_0" / "seed_1000"
    aside = first.with_name("seed_1000.failed-1")  # an earlier attempt the launcher set aside
    (aside / "client_state").mkdir(parents=True)
    (aside / "train.log").write_text("error: round 2: client 3 diverged\n")
    result = _tune(tmp_path, {"FedAvg": FEDAVG}, trials=4, launcher=partial(launch, train=with_state))
    trials = result.methods["FedAvg"]["trials"]
    assert {t["state"] for t in trials} == {"complete", "failed"}
    runs = [tmp_path / "tuning" / "FedAvg" / f"trial_{t['number']}" / f"seed_{s}" for t in trials for s in (1000, 1001)]
    assert all(run.is_dir() and not (run / "client_state").exists() for run in runs)
    assert (aside / "train.log").is_file() and not (aside / "client_state").exists()


def test_a_failure_without_an_error_line_is_the_exception_its_log_ends_on():
    err = RuntimeError("IGFL/trial_1 seed 1001 failed (exit 1; the run directory is kept: logs/IGFL/trial_1/seed_1001):\n"
                       "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: The histogram is empty\n")
    assert failure_reason(err) == "IGFL/trial_1 seed 1001 failed (exit 1): ValueError: The histogram is empty"
    assert failure_reason(RuntimeError("FedAvg seed 0 failed (exit 2; the run directory is kept: d):")) == \
        "FedAvg seed 0 failed (exit 2)"
