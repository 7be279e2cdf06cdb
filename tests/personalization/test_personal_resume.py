"""A personalized run resumes exactly: 2 + 2 rounds give bitwise the models of 4 (docs/personalization.md)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import run_cli

DITTO = {"trainer.callbacks": [{"class_path": "lightning_fl.callbacks.Ditto", "init_args": {"lam": 0.5}},
                               {"class_path": "lightning_fl.callbacks.FairnessMetrics"},
                               {"class_path": "pytorch_lightning.callbacks.ModelCheckpoint",
                                "init_args": {"save_last": True, "every_n_epochs": 1, "save_top_k": 0}}],
         "model.client": {"class_path": "lightning_fl.models.MLP",
                          "init_args": {"in_features": 60, "num_classes": 10, "hidden": [8]}},
         "model.eval": {"model": "personal"}}


def _state(tmp_path, name):
    run = tmp_path / "logs" / name / "version_0"
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    personal = next(v for k, v in checkpoint["callbacks"].items() if k.startswith("Ditto"))["clients"]["personal"]
    weights = {k: v for k, v in checkpoint["state_dict"].items() if k.startswith("model.")}
    accuracy = (run / "client_accuracy.csv").read_text().splitlines()
    return weights, personal, [line for line in accuracy if line.startswith("4,")]


# Memory-stored rows are compared row by row in tests/test_state_contract.py (Ditto).
@pytest.mark.parametrize("store", ["disk"])
def test_two_plus_two_rounds_equal_four(tiny, tmp_path, store):
    whole = tiny(**DITTO, **{"model.client_state": store, "trainer.logger.init_args.name": "whole"})
    assert run_cli("fit", "--config", str(whole)) == 0
    halves = tiny(**DITTO, **{"model.client_state": store, "trainer.logger.init_args.name": "halves"})
    assert run_cli("fit", "--config", str(halves), "--trainer.max_epochs", "2") == 0
    assert run_cli("fit", "--config", str(halves), "--ckpt_path", "last") == 0
    (w_a, p_a, acc_a), (w_b, p_b, acc_b) = _state(tmp_path, "whole"), _state(tmp_path, "halves")
    assert all(torch.equal(w_a[k], w_b[k]) for k in w_a)
    assert acc_a and acc_a == acc_b  # every client's personal accuracy at round 4
    if store == "memory":
        assert torch.equal(p_a["ids"], p_b["ids"]) and torch.equal(p_a["rows"], p_b["rows"])
