"""A mistyped stage or attack class path, or option, is one line naming the field and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytorch_lightning.cli import LightningArgumentParser as ArgumentParser

from lightning_fl.aggregation.config_errors import stage_config_error
from lightning_fl.apps.cli import FederatedArgumentParser
from tests.conftest import run_cli, tiny_config, write_config


def _report(tmp_path: Path, monkeypatch, *args: str) -> str:
    """jsonargparse's own report for a run with ``args`` (what the CLI translates), from the top-level parser."""
    config = write_config(tmp_path / "c.yaml", tiny_config(tmp_path / "logs"))
    reports = []

    def error(self, message, ex=None):
        if self.exit_on_error:  # the top-level parser: nested ones only pass their part up
            reports.append(message)
            raise SystemExit(9)
        return ArgumentParser.error(self, message, ex)

    monkeypatch.setattr(FederatedArgumentParser, "error", error)
    assert run_cli("fit", "--config", str(config), *args) == 9
    return reports[0]


@pytest.mark.parametrize(("args", "message"), [
    (("--model.attack", "lightning_fl.aggregation.attacks.Bogus"),
     "model.attack must be one of lightning_fl.aggregation.attacks.ALIE, lightning_fl.aggregation.attacks.Gaussian,"
     " lightning_fl.aggregation.attacks.IPM, lightning_fl.aggregation.attacks.LabelFlip,"
     " lightning_fl.aggregation.attacks.Scale, lightning_fl.aggregation.attacks.SignFlip;"
     " got 'lightning_fl.aggregation.attacks.Bogus'"),
    (("--model.aggregation.rule", "lightning_fl.aggregation.NormClip"),
     "model.aggregation.rule must be one of lightning_fl.aggregation.Bulyan, lightning_fl.aggregation.CenteredClipping,"
     " lightning_fl.aggregation.GeometricMedian, lightning_fl.aggregation.Krum, lightning_fl.aggregation.Mean,"
     " lightning_fl.aggregation.Median, lightning_fl.aggregation.MultiKrum, lightning_fl.aggregation.TrimmedMean;"
     " got 'lightning_fl.aggregation.NormClip'"),
    (("--model.aggregation.rule", "lightning_fl.aggregation.Krum", "--model.aggregation.rule.init_args.bogus", "3"),
     "model.aggregation.rule.init_args.bogus is not an option of Krum; its options are: krum_neighbours, distance"),
])
def test_jsonargparse_reports_become_one_line(tmp_path, monkeypatch, args, message):
    assert stage_config_error(_report(tmp_path, monkeypatch, *args)) == message


def test_other_reports_are_left_alone():
    assert stage_config_error('Parser key "model.optimizer":\n  - Problem with given class_path \'x\':\n  y') is None
    assert stage_config_error("something else") is None


def test_the_cli_prints_the_one_line(tmp_path, capsys):
    config = write_config(tmp_path / "c.yaml", tiny_config(tmp_path / "logs"))
    assert run_cli("fit", "--config", str(config), "--model.attack", "lightning_fl.aggregation.Krum") == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
        "error: model.attack must be one of lightning_fl.aggregation.attacks.ALIE,")
