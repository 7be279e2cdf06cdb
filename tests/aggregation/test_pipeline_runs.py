"""The pipeline in runs: YAML ``class_path`` stages, exact resume, TensorBoard scalars, one-line errors."""

from __future__ import annotations

import pytest
import torch

from tests.callbacks.helpers import CHECKPOINT, events, load_last, run_4_and_2_plus_2
from tests.conftest import run_cli

ROBUST = {"transforms": [{"class_path": "lightning_fl.aggregation.NormClip", "init_args": {"max_norm": 0.5}}],
          "rule": {"class_path": "lightning_fl.aggregation.CenteredClipping", "init_args": {"tau": 0.2}},
          "server_optimizer": {"class_path": "lightning_fl.aggregation.ServerAdam", "init_args": {"lr": 0.05}}}


def _callbacks(aggregation: str = "DWFed") -> list[dict]:
    return [{"class_path": f"lightning_fl.callbacks.{aggregation}"}, CHECKPOINT]


def test_stateful_stages_resume_exactly_and_log_per_round(tiny, tmp_path):
    # DWFed weights, clipping, centered clipping (its centre is state) and FedAdam's server step (m, v).
    full, _ = run_4_and_2_plus_2(tiny, tmp_path, **{"trainer.callbacks": _callbacks(), "model.aggregation": ROBUST})
    saved = full["callbacks"]["DWFed"]
    assert set(saved["server"]) == {"m", "v"} and saved["pipeline"]["rule"]["server"]["center"].shape == (610,)
    scalars = events(tmp_path)
    assert [e.step for e in scalars.Scalars("robust/clipped_fraction")] == [1, 2, 3, 4]
    assert [e.step for e in scalars.Scalars("server/m_norm")] == [1, 2, 3, 4]


def test_a_pipeline_changes_the_model_and_the_identity_does_not(tiny, tmp_path):
    plain = tiny(**{"trainer.callbacks": _callbacks("FedAvg")})
    mean = tiny(**{"trainer.callbacks": _callbacks("FedAvg"),
                   "model.aggregation": {"rule": {"class_path": "lightning_fl.aggregation.Mean"}}})
    median = tiny(**{"trainer.callbacks": _callbacks("FedAvg"),
                     "model.aggregation": {"rule": {"class_path": "lightning_fl.aggregation.Median"}}})
    for config in (plain, mean, median):
        assert run_cli("fit", "--config", str(config)) == 0
    weights = [load_last(tmp_path, v)["state_dict"] for v in range(3)]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert not all(torch.equal(weights[0][k], weights[2][k]) for k in weights[0])


def test_adding_a_pipeline_to_a_resumed_run_is_a_named_change(tiny, tmp_path, capsys):
    assert run_cli("fit", "--config", str(tiny(**{"trainer.callbacks": _callbacks(), "trainer.max_epochs": 2}))) == 0
    ckpt = tmp_path / "logs" / "run" / "version_0" / "checkpoints" / "last.ckpt"
    config = tiny(**{"trainer.callbacks": _callbacks(), "model.aggregation": ROBUST})
    assert run_cli("fit", "--config", str(config), "--ckpt_path", str(ckpt)) == 2
    assert "model.aggregation: checkpoint 'absent' vs config" in capsys.readouterr().err


@pytest.mark.parametrize(("overrides", "message"), [
    ({"model.aggregation": {"rule": {"class_path": "lightning_fl.aggregation.Krum"}, "f": 1}},
     "error: model.aggregation.rule Krum needs K > 2f + 2; got K = 3 (model.clients_per_round) and f = 1"
     " (model.aggregation.f)"),
    ({"model.aggregation": {"rule": {"class_path": "lightning_fl.aggregation.Median"}}, "model.exchange": "reduce"},
     "error: model.exchange: reduce exchanges partial sums, but model.aggregation or model.attack needs every client's"
     " update (a transform, pre-aggregator, robust rule or row attack); use exchange: gather"),
    ({"model.aggregation": {"rule": {"class_path": "lightning_fl.aggregation.Median"}},
      "trainer.callbacks": _callbacks("FedDyn")},
     "error: model.aggregation: FedDyn's server step is not a weighted mean of client updates, so it takes no"
     " transforms, rule or server optimizer; remove model.aggregation"),
    ({"model.aggregation": {"rule": {"class_path": "lightning_fl.aggregation.TrimmedMean",
                                     "init_args": {"beta": 0.7}}}},
     "error: model.aggregation.rule.init_args.beta must be in [0, 0.5); got 0.7"),
])
def test_impossible_pipelines_stop_before_training_in_one_line(tiny, capsys, overrides, message):
    assert run_cli("fit", "--config", str(tiny(**overrides))) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == message
