"""The institutions' aggregation pipeline: one copy with its own state per institution, by hand and in runs."""

from __future__ import annotations

import pytest
import torch

from lightning_fl.aggregation import AggregationPipeline, CenteredClipping, Krum, TrimmedMean
from lightning_fl.faults.validation import ConfigError
from lightning_fl.simulation.hierarchy import InstitutionAggregation
from tests.callbacks.helpers import CHECKPOINT, make_update, run_4_and_2_plus_2

MEMBERS = [torch.tensor([0, 1, 2]), torch.tensor([3, 4, 5])]


def test_each_institution_combines_with_its_own_robust_rule():
    aggregation = InstitutionAggregation("fedavg", AggregationPipeline(rule=TrimmedMean(b=1)))
    aggregation.setup(MEMBERS)
    # Rows 1, 2, 10 from w^(m) = 0: drop 1 and 10, keep 2 (the weighted mean would be 13/3).
    new_w = aggregation.combine(torch.zeros(1), make_update(0, [0, 1, 2], [[1.0], [2.0], [10.0]]), 0)
    torch.testing.assert_close(new_w, torch.tensor([2.0]))


def test_institution_states_are_separate_and_resume():
    make = lambda: InstitutionAggregation("fedavg", AggregationPipeline(rule=CenteredClipping(tau=1.0)))  # noqa: E731
    aggregation = make()
    aggregation.setup(MEMBERS)
    # Institution 0 moves its centre to 1 (rows 4, 2 clipped to 1, 1); institution 1 to -1.
    aggregation.combine(torch.zeros(1), make_update(0, [0, 1], [[4.0], [2.0]], [1, 1]), 0)
    aggregation.combine(torch.zeros(1), make_update(0, [3, 4], [[-4.0], [-2.0]], [1, 1]), 1)
    saved = aggregation.state_dict()
    assert [p["rule"]["server"]["center"].item() for p in saved["pipelines"]] == [1.0, -1.0]
    resumed = make()
    resumed.setup(MEMBERS)
    resumed.load_state_dict(saved)
    # From centre 1: rows 4, 2 -> diffs 3, 1 clipped to 1, 1 -> 2.
    new_w = resumed.combine(torch.zeros(1), make_update(1, [0, 1], [[4.0], [2.0]], [1, 1]), 0)
    torch.testing.assert_close(new_w, torch.tensor([2.0]))


def test_a_rule_an_institution_is_too_small_for_is_a_config_error():
    aggregation = InstitutionAggregation("fedavg", AggregationPipeline(rule=Krum(), f=1))
    with pytest.raises(ConfigError) as err:
        aggregation.setup(MEMBERS)
    assert str(err.value) == ("model.hierarchy.institution_pipeline.rule Krum needs K > 2f + 2; got K = 3 (the clients"
                              " of institution 0) and f = 1 (model.hierarchy.institution_pipeline.f)")


def test_robust_institutions_and_a_robust_server_resume_exactly(tiny, tmp_path):
    hierarchy = {"num_institutions": 2, "local_rounds": 2, "institution_aggregation": "fedadp",
                 "institution_pipeline": {"rule": {"class_path": "lightning_fl.aggregation.CenteredClipping",
                                                   "init_args": {"tau": 0.5}}}}
    full, _ = run_4_and_2_plus_2(tiny, tmp_path, **{
        "model.hierarchy": hierarchy, "trainer.callbacks": [{"class_path": "lightning_fl.callbacks.FedAvg"}, CHECKPOINT],
        "model.aggregation": {"rule": {"class_path": "lightning_fl.aggregation.GeometricMedian"}}})
    institutions = full["federated"]["hierarchy"]["institution_state"]["pipelines"]
    assert len(institutions) == 2 and not torch.equal(institutions[0]["rule"]["server"]["center"],
                                                      institutions[1]["rule"]["server"]["center"])
