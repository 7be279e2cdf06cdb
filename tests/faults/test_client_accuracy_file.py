"""client_accuracy.csv on resume: rewritten atomically, and a damaged row is one error line, never used."""

from __future__ import annotations

import errno
import os

import pytest
import torch

from lightning_fl.faults.validation import ConfigError, OutputWriteError
from lightning_fl.reporting.client_accuracy import append_client_rows

ROWS = "round,stage,client,accuracy,samples\n2,test,0,0.5,4\n2,test,1,0.25,4\n4,test,0,0.75,4\n4,test,1,0.5,4\n"


def test_a_resumed_run_drops_the_rounds_it_evaluates_again(tmp_path):
    path = tmp_path / "client_accuracy.csv"
    path.write_text(ROWS)
    append_client_rows(path, 4, "test", torch.tensor([1.0, 0.0]), torch.tensor([4, 4]), first_of_stage=True)
    assert path.read_text() == ROWS.rsplit("4,test,0", 1)[0] + "4,test,0,1.0,4\n4,test,1,0.0,4\n"
    assert [p.name for p in tmp_path.iterdir()] == ["client_accuracy.csv"]


def test_a_failure_while_rewriting_keeps_every_earlier_row(tmp_path, monkeypatch):
    path = tmp_path / "client_accuracy.csv"
    path.write_text(ROWS)

    def full_disk(*args: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OutputWriteError):
        append_client_rows(path, 4, "test", torch.tensor([1.0, 0.0]), torch.tensor([4, 4]), first_of_stage=True)
    assert path.read_text() == ROWS


@pytest.mark.parametrize("damage", ["2,test\n", "two,test,0,0.5,4\n"])
def test_a_damaged_row_is_one_line_and_the_file_is_left_alone(damage, tmp_path):
    path = tmp_path / "client_accuracy.csv"
    path.write_text(ROWS + damage)
    with pytest.raises(ConfigError, match=r"client_accuracy.csv: a damaged row"):
        append_client_rows(path, 4, "test", torch.tensor([1.0, 0.0]), torch.tensor([4, 4]), first_of_stage=True)
    assert path.read_text() == ROWS + damage
