"""A personalized comparison over seeds (docs/personalization.md): headline, worst 20%, gap, gain over Local.

Ditto and Local, 2 seeds, 3 rounds evaluated every round under ``rounds: mean_last`` (r = 2) with one
unseen client; every number of ``personal_summary.csv`` is recomputed here from the runs'
``client_accuracy.csv`` alone, with plain Python.
"""

from __future__ import annotations

import csv
import math
import statistics
from functools import partial
from pathlib import Path

import pytest

from lightning_fl.apps import compare
from lightning_fl.experiments.launcher import launch
from lightning_fl.experiments.runs import Run
from lightning_fl.personalization import EvalProtocol
from tests.conftest import run_cli, tiny_config, write_config

EVAL = {"model": "personal", "rounds": "mean_last", "last_r": 2, "unseen_fraction": 0.2,
        "on_missing_personal": "finetune", "finetune_steps": 2}
SEEDS, LAST_R = (0, 1), 2
T_975_DF1 = 12.706204736  # two seeds: one degree of freedom (t_{0.975,1} = tan(0.475 pi))


def _config(tmp_path: Path, name: str, callback: str) -> str:
    config = tiny_config(tmp_path, **{"trainer.max_epochs": 3, "trainer.check_val_every_n_epoch": 1,
                                      "data.init_args.seed": 0})
    config["trainer"]["callbacks"] = [{"class_path": f"lightning_fl.callbacks.{callback}"},
                                      {"class_path": "lightning_fl.callbacks.FairnessMetrics",
                                       "init_args": {"histogram_every": 100}}]  # one figure per stage: quicker
    config["model"]["eval"] = EVAL
    return str(write_config(tmp_path / f"{name}.yaml", config))


def _train_in_process(run: Run) -> int:
    return run_cli(*run.command[2:])  # drop "-m lightning_fl"


def _clients(run: Path) -> dict[tuple[int, str], dict[int, tuple[float, float]]]:
    """``{(round, stage): {client: (accuracy, samples)}}`` of the clients with samples."""
    out: dict[tuple[int, str], dict[int, tuple[float, float]]] = {}
    with open(run / "client_accuracy.csv") as f:
        for r in csv.DictReader(f):
            if float(r["samples"]) > 0:
                out.setdefault((int(r["round"]), r["stage"]), {})[int(r["client"])] = (float(r["accuracy"]),
                                                                                       float(r["samples"]))
    return out


def _by_hand(run: Path, local: Path | None) -> dict[str, float]:
    """One run's reported numbers: each statistic at each of the last r evaluations, then their mean."""
    clients = _clients(run)
    rounds = sorted(t for t, stage in clients if stage == "test")[-LAST_R:]
    per_round = []
    for t in rounds:
        seen, unseen = clients[(t, "test")], clients[(t, "test/unseen")]
        acc = sorted(a for a, _ in seen.values())
        mean = sum(acc) / len(acc)
        values = {"acc_mean": mean, "acc_pooled": sum(a * m for a, m in seen.values()) / sum(m for _, m in seen.values()),
                  "acc_worst20": sum(acc[: math.ceil(0.2 * len(acc))]) / math.ceil(0.2 * len(acc)),
                  "gap_client_mean": sum(a for a, _ in unseen.values()) / len(unseen) - mean}
        if local is not None:
            theirs = _clients(local)[(t, "test")]
            gains = [a - theirs[k][0] for k, (a, _) in seen.items()]
            values |= {"win_rate": sum(g > 0 for g in gains) / len(gains), "mean_gain": sum(gains) / len(gains),
                       "min_gain": min(gains)}
        per_round.append(values)
    return {key: sum(v[key] for v in per_round) / len(per_round) for key in per_round[0]}


def test_a_personalized_comparison_reports_the_gap_and_the_gain_over_local_with_intervals(tmp_path, capsys):
    out = tmp_path / "out"
    result = compare.main([f"Ditto={_config(tmp_path, 'ditto', 'Ditto')}", f"Alone={_config(tmp_path, 'local', 'Local')}",
                           "--save-dir", str(out), "--seeds", "2", "--jobs", "1"],
                          launcher=partial(launch, train=_train_in_process))
    with open(out / "personal_summary.csv") as f:
        summary = {(r["method"], r["metric"]): r for r in csv.DictReader(f)}

    expected: dict[tuple[str, str], list[float]] = {}
    for seed in SEEDS:
        local = out / "Alone" / f"seed_{seed}"
        for method, gain_over in (("Ditto", local), ("Alone", None)):  # the Local run has no gain over itself
            for key, value in _by_hand(out / method / f"seed_{seed}", gain_over).items():
                expected.setdefault((method, key), []).append(value)
    assert ("Ditto", "min_gain") in expected and ("Alone", "win_rate") not in summary
    for (method, metric), values in expected.items():
        row = summary[(method, metric)]
        mean, std = statistics.mean(values), statistics.stdev(values)
        assert row["n"] == "2" and float(row["mean"]) == pytest.approx(mean, abs=1e-12), (method, metric)
        assert float(row["std"]) == pytest.approx(std, abs=1e-12)
        if std > 0:
            assert float(row["ci95_high"]) == pytest.approx(mean + T_975_DF1 * std / math.sqrt(2), rel=1e-9)
    # the gain's unit lets an interval go below 0, and the rounds the reports use are the last r
    assert summary[("Ditto", "mean_gain")]["unit"] == "fraction difference"
    assert float(summary[("Ditto", "round")]["mean"]) == 3

    report = (out / "comparison.md").read_text()
    line = EvalProtocol(**EVAL).describe()
    assert report.count(line) == 2  # above the summary table and above the personalized table
    assert "Reported evaluation (each run's model.eval rounds rule)" in report
    header = next(i for i, text in enumerate(report.splitlines()) if text.startswith("| Method | Seeds | Round | Client"))
    assert report.splitlines()[header - 2] == line
    assert "Win rate over Local (%)" in report and "Gap, client mean (pp)" in report
    assert "| Alone | 2 | 3 |" in report and report in capsys.readouterr().out
    # the summary table follows the rule too: its Average is the personalized table's client mean
    assert result.summary[("Ditto", "acc_mean")].mean == pytest.approx(float(summary[("Ditto", "acc_mean")]["mean"]))
    assert result.personal is not None and not result.personal.notes


def test_gain_and_describe_lines_say_when_protocols_differ():
    from lightning_fl.experiments.personal import _same_for_gain, describe_lines

    ditto, local = EvalProtocol(model="personal", rounds="mean_last", last_r=2), EvalProtocol(model="personal")
    assert _same_for_gain(ditto, local) == "model.eval.rounds differs from Local's"
    assert _same_for_gain(ditto, EvalProtocol(model="personal", rounds="mean_last", last_r=3)) == \
        "model.eval.last_r differs from Local's"
    assert _same_for_gain(EvalProtocol(model="personal", clients="all"), local) == \
        "model.eval.clients differs from Local's"
    assert _same_for_gain(local, EvalProtocol(model="personal")) == ""
    lines = describe_lines({"A/seed_0": ditto, "A/seed_1": ditto, "L/seed_0": local}, {"A/seed_0": "A", "A/seed_1": "A",
                                                                                        "L/seed_0": "L"})
    assert lines == f"A: {ditto.describe()}\nL: {local.describe()}"
    assert describe_lines({"A/seed_0": local, "L/seed_0": local}, {"A/seed_0": "A", "L/seed_0": "L"}) == local.describe()
