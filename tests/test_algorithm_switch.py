"""Switching a config's algorithm from the command line: the last aggregation callback given wins."""

from __future__ import annotations

import torch
import yaml

from lightning_fl.apps.algorithm_choice import algorithm_names
from tests.conftest import ROUND_CHECKPOINT, run_cli


def _weights(run_dir):
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    weights = {k: v for k, v in state.items() if k.startswith("model.")}
    assert weights, sorted(state)
    return weights


def test_appending_an_algorithm_replaces_the_configs_and_says_so(tiny, tmp_path, caplog):
    # The same run written with FedProx(mu=1) in the YAML, against FedAvg's config + FedProx appended.
    written = tiny(**{"trainer.callbacks": [{"class_path": "lightning_fl.callbacks.FedProx", "init_args": {"mu": 1.0}},
                                            {"class_path": "lightning_fl.callbacks.FairnessMetrics"},
                                            ROUND_CHECKPOINT],
                      "trainer.logger.init_args.name": "written"})
    switched = tiny(**{"trainer.logger.init_args.name": "switched"})
    assert run_cli("fit", "--config", str(written)) == 0
    assert "replaces" not in caplog.text
    assert run_cli("fit", "--config", str(switched), "--trainer.callbacks+=FedProx", "--trainer.callbacks.mu=1.0") == 0
    assert "trainer.callbacks: FedProx replaces FedAvg" in caplog.text
    written_dir, switched_dir = (tmp_path / "logs" / name / "version_0" for name in ("written", "switched"))
    a, b = _weights(written_dir), _weights(switched_dir)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    saved = yaml.safe_load((switched_dir / "config.yaml").read_text())
    paths = [c["class_path"] for c in saved["trainer"]["callbacks"]]
    assert "lightning_fl.callbacks.FedProx" in paths and "lightning_fl.callbacks.FedAvg" not in paths


def test_switched_run_differs_from_the_configs_algorithm(tiny, tmp_path):
    config = tiny(**{"trainer.max_epochs": 2})
    assert run_cli("fit", "--config", str(config), "--trainer.logger.init_args.name", "fedavg") == 0
    assert run_cli("fit", "--config", str(config), "--trainer.logger.init_args.name", "scaffold",
                   "--trainer.callbacks+=lightning_fl.callbacks.Scaffold") == 0
    a, b = (_weights(tmp_path / "logs" / name / "version_0") for name in ("fedavg", "scaffold"))
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_fit_help_lists_the_algorithms(capsys):
    assert run_cli("fit", "--help") == 0
    out = capsys.readouterr().out.replace("\n", " ")
    for name in ("FedAvg", "FedProx", "Scaffold", "FedFa", "QFFL", "DWFed", "FedAdam", "FedNova", "FedDyn", "IGFL"):
        assert name in out
    assert "FairnessMetrics" not in algorithm_names()


def test_a_python_trainer_with_two_algorithms_is_still_refused():
    # Outside the CLI nothing decides which one the user meant: one line, before training.
    from types import SimpleNamespace

    import pytest

    from lightning_fl.callbacks import FedAvg, FedProx
    from lightning_fl.faults.validation import ConfigError
    from lightning_fl.simulation.default_callbacks import callbacks_to_add

    trainer = SimpleNamespace(callbacks=[FedAvg(), FedProx(mu=0.1)], progress_bar_callback=None)
    with pytest.raises(ConfigError, match="at most one aggregation callback; got FedAvg, FedProx"):
        callbacks_to_add(trainer)
