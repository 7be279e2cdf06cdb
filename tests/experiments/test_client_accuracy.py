"""``client_accuracy.csv``: appended at every evaluation, each evaluation once after a resume."""

from __future__ import annotations

import csv

import torch

from lightning_fl.reporting.client_accuracy import append_client_rows


def _rows(path):
    with open(path) as f:
        return [(r["round"], r["stage"], r["client"], r["accuracy"], r["samples"]) for r in csv.DictReader(f)]


def test_rows_are_appended_and_a_resumed_process_replaces_the_rounds_it_evaluates_again(tmp_path):
    path = tmp_path / "client_accuracy.csv"
    acc, samples = torch.tensor([0.5, float("nan")], dtype=torch.float64), torch.tensor([4.0, 0.0], dtype=torch.float64)
    for round_number in (2, 4):  # a first process evaluates rounds 2 and 4, both splits, then dies
        append_client_rows(path, round_number, "val", acc, samples, first_of_stage=round_number == 2)
        append_client_rows(path, round_number, "test", acc, samples, first_of_stage=round_number == 2)
    assert _rows(path)[:2] == [("2", "val", "0", "0.5", "4"), ("2", "val", "1", "nan", "0")]
    # Its checkpoint is from round 2: the next process evaluates round 4 again, with other numbers.
    new = torch.tensor([0.75, float("nan")], dtype=torch.float64)
    append_client_rows(path, 4, "val", new, samples, first_of_stage=True)
    append_client_rows(path, 4, "test", new, samples, first_of_stage=True)
    rows = _rows(path)
    assert [(r[0], r[1]) for r in rows] == [("2", "val")] * 2 + [("2", "test")] * 2 + [("4", "val")] * 2 + \
        [("4", "test")] * 2
    assert [r[3] for r in rows if r[0] == "4" and r[2] == "0"] == ["0.75", "0.75"]
