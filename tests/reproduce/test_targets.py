"""Rounds and estimated time to target per run: from rounds_to_target.json or the accuracy series, or the run's whole length."""

from __future__ import annotations

import doctest
import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from torch.utils.tensorboard import SummaryWriter

from lightning_fl.experiments.runs import Run
from lightning_fl.reproduce.paper import SettingResults
from lightning_fl.reproduce.settings import Setting
from lightning_fl.reproduce.targets import (
    configured_target,
    estimated_seconds_to_target,
    first_round_at,
    fraction_of_final,
    reached,
    reached_by,
    rounds_to,
    rounds_to_target,
    seconds_over_institution_link,
    seconds_to,
)

MONITOR = "test/acc_pooled"


def _results(tmp_path: Path, result: dict | None, elapsed: list[float]) -> SettingResults:
    log_dir = tmp_path / "A" / "seed_0"
    log_dir.mkdir(parents=True)
    if result is not None:
        (log_dir / "rounds_to_target.json").write_text(json.dumps({"monitor": MONITOR, "target": 0.6, **result}))
    with SummaryWriter(str(log_dir)) as writer:
        for step, value in enumerate(elapsed, start=1):
            writer.add_scalar("net/elapsed_seconds", value, step)
    # Evaluations at rounds 2, 4, 6 (test) and a val row that must not count.
    rows = [("A/seed_0", "A", 0, r, "test", "acc_pooled", 0.1 * r) for r in (2, 4, 6)]
    rows.append(("A/seed_0", "A", 0, 8, "val", "acc_pooled", 0.9))
    return SettingResults(Setting("s", {"A": "a.yaml"}), [0], rows, [Run("A", 0, log_dir, ())])


def test_a_reached_target_reads_the_json(tmp_path) -> None:
    results = _results(tmp_path, {"round": 4, "estimated_seconds": 7.25}, [1.0, 2.0, 3.0, 7.25, 9.0, 11.0])
    assert reached(results, "A", 0) == 1.0
    assert rounds_to_target(results, "A", 0) == 4.0
    assert estimated_seconds_to_target(results, "A", 0) == 7.25


def test_a_missed_target_counts_the_whole_run(tmp_path) -> None:
    results = _results(tmp_path, {"round": None, "estimated_seconds": None}, [1.5, 3.0, 4.5, 6.0, 7.5, 9.0])
    assert reached(results, "A", 0) == 0.0
    assert rounds_to_target(results, "A", 0) == 6.0  # the last test evaluation, not the val row at 8
    assert estimated_seconds_to_target(results, "A", 0) == pytest.approx(9.0)  # net/elapsed_seconds at step 6


def test_a_run_without_the_file_has_no_value(tmp_path) -> None:
    results = _results(tmp_path, None, [1.0])
    for metric in (reached, rounds_to_target, estimated_seconds_to_target):
        with pytest.raises(KeyError):
            metric(results, "A", 0)


def test_time_over_another_institution_link_adds_the_transfer_difference_per_round(tmp_path) -> None:
    # A three-layer run: 2 institutions, 10 Mbit/s + 50 ms to the server; its events say each round sent
    # 2 x 250,000 bytes down and up (250,000 per institution). Target reached at round 4 after 7.25 s.
    results = _results(tmp_path, {"round": 4, "estimated_seconds": 7.25}, [1.0, 2.0, 3.0, 7.25])
    [run] = results.runs
    with SummaryWriter(str(run.log_dir)) as writer:
        for step in (1, 2):
            writer.add_scalar("comm/institution_down_bytes", 500_000.0, step)
            writer.add_scalar("comm/institution_up_bytes", 500_000.0, step)
    config = tmp_path / "a.yaml"
    config.write_text(yaml.safe_dump({
        "trainer": {"callbacks": [{"class_path": "lightning_fl.callbacks.CommunicationCost", "init_args": {
            "client_bandwidth_mbps": 100, "institution_bandwidth_mbps": 10, "institution_latency_ms": 50}}]},
        "model": {"hierarchy": {"num_institutions": 2}}}))
    results = SettingResults(results.setting, [0], results.rows, [replace(run, config=str(config))])
    # By hand: 250,000 bytes = 2 Mbit: 0.2 s + 0.05 s at 10 Mbit/s, 2 s + 0.1 s at 1 Mbit/s and 100 ms;
    # the difference (1.85 s) once down and once up, for each of the 4 rounds to the target.
    value = seconds_over_institution_link(1.0, 100.0)(results, "A", 0)
    assert value == pytest.approx(7.25 + 4 * 2 * 1.85)
    assert seconds_over_institution_link(10.0, 50.0)(results, "A", 0) == pytest.approx(7.25)  # the run's own link
    flat = SettingResults(results.setting, [0], results.rows, [replace(run, config=str(tmp_path / "b.yaml"))])
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"trainer": {"callbacks": []}, "model": {}}))
    with pytest.raises(KeyError):  # a flat run has no institution link
        seconds_over_institution_link(1.0, 100.0)(flat, "A", 0)


def _series_results(tmp_path: Path, curves: dict[str, list[float]], elapsed: dict[str, list[float]],
                    config: dict | None = None) -> SettingResults:
    """Runs of seed 0 with the given test/acc_pooled per round (from round 1) and net/elapsed_seconds."""
    rows, runs = [], []
    for method, curve in curves.items():
        log_dir = tmp_path / method / "seed_0"
        log_dir.mkdir(parents=True)
        with SummaryWriter(str(log_dir)) as writer:
            for step, value in enumerate(elapsed[method], start=1):
                writer.add_scalar("net/elapsed_seconds", value, step)
        rows += [(f"{method}/seed_0", method, 0, r, "test", "acc_pooled", v) for r, v in enumerate(curve, start=1)]
        path = tmp_path / f"{method}.yaml"
        path.write_text(yaml.safe_dump(config or {"trainer": {"callbacks": []}}))
        runs.append(Run(method, 0, log_dir, (), config=str(path)))
    return SettingResults(Setting("s", dict.fromkeys(curves, "x.yaml")), [0], rows, runs)


def test_first_round_at_a_target() -> None:
    assert first_round_at([1, 2, 3], [0.2, 0.6, 0.5], 0.6) == 2  # reaching counts (>=)
    assert first_round_at([1, 2, 3], [0.2, 0.6, 0.5], 0.61) is None


def test_a_fraction_of_the_references_final_accuracy_is_reached_late(tmp_path) -> None:
    # The reference ends at 0.80: 90% of it is 0.72. A reaches it at round 3 (0.75), after 6.5 s of its
    # modelled time; B never does and counts its whole length (4 rounds, 12 s).
    results = _series_results(tmp_path, {"Ref": [0.5, 0.7, 0.78, 0.8], "A": [0.6, 0.7, 0.75, 0.74],
                                         "B": [0.3, 0.5, 0.6, 0.71]},
                              {"Ref": [1, 2, 3, 4], "A": [2.0, 4.0, 6.5, 9.0], "B": [3.0, 6.0, 9.0, 12.0]})
    target = fraction_of_final("Ref", 0.9)
    assert target(results, 0) == pytest.approx(0.72)
    assert [rounds_to(target)(results, m, 0) for m in ("A", "B")] == [3.0, 4.0]
    assert [seconds_to(target)(results, m, 0) for m in ("A", "B")] == [6.5, 12.0]
    assert [reached_by(target)(results, m, 0) for m in ("A", "B")] == [1.0, 0.0]
    assert rounds_to(lambda results, seed: 0.7)(results, "A", 0) == 2.0  # a fixed target


def test_seconds_to_a_target_over_another_link(tmp_path) -> None:
    # Two institutions on a 10 Mbit/s, 50 ms server link; 250,000 bytes each way per institution. Over 1 Mbit/s
    # and 100 ms each transfer takes 2.1 s instead of 0.25 s: 2 x 1.85 s more per round, for 2 rounds.
    config = {"trainer": {"callbacks": [{"class_path": "lightning_fl.callbacks.CommunicationCost", "init_args": {
        "client_bandwidth_mbps": 100, "institution_bandwidth_mbps": 10, "institution_latency_ms": 50}}]},
        "model": {"hierarchy": {"num_institutions": 2}}}
    results = _series_results(tmp_path, {"A": [0.5, 0.9, 0.9]}, {"A": [1.0, 2.5, 4.0]}, config)
    with SummaryWriter(str(results.log_dir("A", 0))) as writer:
        writer.add_scalar("comm/institution_down_bytes", 500_000.0, 1)
        writer.add_scalar("comm/institution_up_bytes", 500_000.0, 1)
    assert seconds_to(lambda r, s: 0.8, (1.0, 100.0))(results, "A", 0) == pytest.approx(2.5 + 2 * 2 * 1.85)
    assert configured_target(results, "A", 0) is None


def test_seconds_to_a_target_needs_the_time_estimate(tmp_path) -> None:
    results = _series_results(tmp_path, {"A": [0.5, 0.9]}, {"A": [1.0]})  # no elapsed time at round 2
    with pytest.raises(KeyError, match="round 2"):
        seconds_to(lambda r, s: 0.8)(results, "A", 0)


def test_docstring_examples() -> None:
    import lightning_fl.reproduce.targets as module

    result = doctest.testmod(module)
    assert result.attempted >= 1 and result.failed == 0
