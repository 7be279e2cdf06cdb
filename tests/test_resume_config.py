"""Resuming checks its configuration and continues the same run directory."""

from __future__ import annotations

import pytest
import torch

from lightning_fl.simulation.resume_check import changed_fields
from tests.callbacks.helpers import events, version_dir
from tests.conftest import run_cli


def _half(tiny, tmp_path, **overrides):
    assert run_cli("fit", "--config", str(tiny(**{"trainer.max_epochs": 2, **overrides}))) == 0
    return version_dir(tmp_path, 0) / "checkpoints" / "last.ckpt"


def _last_error(capsys) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(("overrides", "named"), [
    ({"model.local_epochs": 5}, "model.local_epochs: checkpoint 2 vs config 5"),
    ({"data.init_args.seed": 3}, "data.seed: checkpoint 0 vs config 3"),
    ({"data.init_args.variant": "0_0"}, "data.variant: checkpoint '1_1' vs config '0_0'"),
    ({"model.optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.1}}},
     "model.optimizer.lr: checkpoint 0.05 vs config 0.1"),
    ({"trainer.callbacks": [{"class_path": "lightning_fl.callbacks.Scaffold"}]},
     "callbacks.FedAvg: checkpoint {'weighting': 'samples'} vs config 'absent'; callbacks.Scaffold: checkpoint 'absent'"),
])
def test_a_change_that_breaks_exactness_is_an_error_naming_it(tiny, tmp_path, capsys, overrides, named) -> None:
    checkpoint = _half(tiny, tmp_path)
    assert run_cli("fit", "--config", str(tiny(**overrides)), "--ckpt_path", str(checkpoint)) == 2
    line = _last_error(capsys)
    assert line.startswith("error: the checkpoint was trained under another configuration (") and named in line
    assert "model.resume_despite_changes: true" in line


def test_a_user_who_means_it_can_resume_anyway(tiny, tmp_path) -> None:
    checkpoint = _half(tiny, tmp_path)
    config = tiny(**{"model.local_epochs": 3, "model.resume_despite_changes": True})
    with pytest.warns(UserWarning, match="resuming despite configuration changes: model.local_epochs: checkpoint 2"
                                         " vs config 3"):
        assert run_cli("fit", "--config", str(config), "--ckpt_path", str(checkpoint)) == 0


def test_engine_and_store_may_change_and_the_run_directory_continues(tiny, tmp_path) -> None:
    checkpoint = _half(tiny, tmp_path)
    config = tiny(**{"model.engine": "sequential", "model.client_state": "disk"})
    assert run_cli("fit", "--config", str(config), "--ckpt_path", str(checkpoint)) == 0
    # One run directory: the resumed rounds 3 and 4 are logged next to rounds 1 and 2.
    assert [p.name for p in (tmp_path / "logs" / "run").iterdir()] == ["version_0"]
    assert [e.step for e in events(tmp_path).Scalars("train/loss")] == [1, 2, 3, 4]
    assert torch.load(checkpoint, weights_only=False)["federated"]["rounds_completed"] == 4


def test_a_changed_hierarchy_local_rounds_is_caught_on_resume(tiny, tmp_path, capsys) -> None:
    hierarchy = {"num_institutions": 2, "local_rounds": 2}
    checkpoint = _half(tiny, tmp_path, **{"model.hierarchy": hierarchy})
    config = tiny(**{"model.hierarchy": {**hierarchy, "local_rounds": 3}})
    assert run_cli("fit", "--config", str(config), "--ckpt_path", str(checkpoint)) == 2
    line = _last_error(capsys)
    assert line.startswith("error: the checkpoint was trained under another configuration (")
    assert "model.hierarchy.local_rounds: checkpoint 2 vs config 3" in line


def test_a_checkpoint_from_before_local_rounds_was_recorded_still_resumes() -> None:
    saved = {"model.local_epochs": 2}
    assert changed_fields(saved, {**saved, "model.hierarchy.local_rounds": 3}) == []
    before, after = {**saved, "model.hierarchy.local_rounds": 2}, {**saved, "model.hierarchy.local_rounds": 3}
    assert changed_fields(before, after) == ["model.hierarchy.local_rounds: checkpoint 2 vs config 3"]
