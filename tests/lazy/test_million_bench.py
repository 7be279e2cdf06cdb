"""bench/million.py: one tiny row in-process writes what the table reads, and the table's ratio column."""

import importlib
import json


def test_a_tiny_lazy_row_trains_and_reports(tmp_path) -> None:
    million = importlib.import_module("bench.million")
    out = tmp_path / "row.json"
    million._worker(300, True, "FedAvg", "memory", rounds=2, cohort=10, subset=10, out=out)
    record = json.loads(out.read_text())
    assert len(record["rounds_s"]) == 2 and record["round_s"] == record["rounds_s"][1]  # the first is untimed
    assert record["setup_s"] > 0 and record["eval_s"] >= 0
    assert 0.0 <= record["test_acc_mean"] <= 1.0


def test_rows_compare_the_large_lazy_federation_with_the_small_one() -> None:
    million = importlib.import_module("bench.million")
    rows = million.rows(1_000_000, 10_000)
    assert [r[1:3] for r in rows] == [(1_000_000, True), (10_000, True), (10_000, False), (1_000_000, True)]
    assert rows[3][3:] == ("Scaffold", "disk")
    table = million.format_rows([{"name": "big", "setup_s": 3.0, "round_s": 1.2, "eval_s": 1.0, "peak_rss_mib": 900.0},
                                 {"name": "small", "setup_s": 2.0, "round_s": 1.0, "eval_s": 1.0,
                                  "peak_rss_mib": 500.0}], "small")
    assert "| big | 3.0 | 1.20 | 1.0 | 900 | 1.20x |" in table
