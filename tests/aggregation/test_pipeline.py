"""The aggregation pipeline (docs/architecture.md): each algorithm's (u, p, s), stages by hand, state, set-up errors."""

from __future__ import annotations

import pytest
import torch

from lightning_fl.aggregation import (
    AggregationPipeline,
    Bucketing,
    Bulyan,
    CenteredClipping,
    Krum,
    Mean,
    Median,
    NormClip,
    ServerAdam,
    TrimmedMean,
)
from lightning_fl.callbacks import (
    DWFed,
    FedAdam,
    FedAdp,
    FedAvg,
    FedAvgM,
    FedDyn,
    FedFa,
    FedNova,
    IGFLServer,
    QFFL,
    Scaffold,
)
from lightning_fl.faults.validation import ConfigError
from tests.callbacks.helpers import RecordingLogger, aggregate, fake_federation, make_update, prepared, vector_layout

GLOBAL = torch.tensor([0.5, -1.0, 2.0])
ROWS = [[1.0, 0.0, 2.5], [0.0, -2.0, 1.0], [2.0, -1.5, 3.0], [0.5, 1.0, 2.0]]


def _update(round_idx: int = 0):
    return make_update(round_idx, [0, 1, 2, 3], ROWS, num_samples=[1, 2, 3, 4], num_steps=[1, 2, 3, 2],
                       participation=[1, 2, 1, 3], loss_before=[0.5, 1.0, 2.0, 0.25])


def _with(callback, pipeline: AggregationPipeline | None, cohort: int = 4):
    fed = fake_federation(vector_layout(3), lr=0.1, num_clients=4,
                          label_hist=torch.tensor([[5, 0, 1], [0, 3, 3], [2, 2, 2], [1, 1, 4]]))
    callback = prepared(callback, fed)
    if pipeline is not None:
        pipeline.setup(cohort)
        callback.use_pipeline(pipeline)
    return callback, fed


ALGORITHMS = {
    "FedAvg": FedAvg, "FedAvgM": lambda: FedAvgM(beta=0.5, server_lr=0.7), "FedAdam": FedAdam, "DWFed": DWFed,
    "FedAdp": FedAdp, "QFFL": lambda: QFFL(q=2.0), "FedNova": FedNova, "Scaffold": lambda: Scaffold(server_lr=0.5),
    "IGFLServer": IGFLServer, "FedFa": lambda: FedFa(train_acc="running"),
}


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_the_delta_form_of_each_algorithm_gives_its_own_step(name):
    # A clip radius no row reaches makes the pipeline take the generic path, w^t + s R(U, p) with R the
    # mean, without changing any row: it must land on the algorithm's own (hand-tested) step.
    own, fed = _with(ALGORITHMS[name](), None)
    generic, _ = _with(ALGORITHMS[name](), AggregationPipeline(transforms=[NormClip(1e6)]))
    for round_idx in range(2):  # the second round reads the state the first one left
        expected = aggregate(own, fed, round_idx, GLOBAL, _update(round_idx))
        got = aggregate(generic, fed, round_idx, GLOBAL, _update(round_idx))
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)


def test_fedavg_weights_with_a_trimmed_mean_by_hand():
    cb, fed = _with(FedAvg(), AggregationPipeline(rule=TrimmedMean(b=1)))
    # u = y - w^t per coordinate: [0.5, -0.5, 1.5, 0], [1, -1, -0.5, 2], [0.5, -1, 1, 0]; dropping the lowest
    # and highest leaves (0, 0.5), (-0.5, 1), (0, 0.5): each averages to 0.25.
    new_w = aggregate(cb, fed, 0, GLOBAL, _update())
    torch.testing.assert_close(new_w, GLOBAL + torch.tensor([0.25, 0.25, 0.25]))


def test_krum_picks_the_row_closest_to_its_neighbours_by_hand():
    rows = [[0.0], [1.0], [2.0], [3.0], [10.0]]
    cb, fed = _with(FedAvg(), AggregationPipeline(rule=Krum(), f=1), cohort=5)
    log = RecordingLogger()
    # K - f - 2 = 2 neighbours: scores 1+4, 1+1, 1+1, 1+4, 49+64 -> the lower index of the tie, row 1.
    new_w = aggregate(cb, fed, 0, torch.zeros(1), make_update(0, [0, 1, 2, 3, 4], rows), log)
    torch.testing.assert_close(new_w, torch.tensor([1.0]))
    assert {"robust/f_effective": 1.0} in [m for m, _ in log.scalars]


def test_centered_clipping_carries_its_centre_between_rounds_and_through_a_checkpoint():
    cb, fed = _with(FedAvg(weighting="uniform"), AggregationPipeline(rule=CenteredClipping(tau=1.0)), cohort=2)
    update = make_update(0, [0, 1], [[4.0], [2.0]])
    # Round 0 from v = 0: diffs 4, 2 clipped to 1, 1 -> v = 1.
    torch.testing.assert_close(aggregate(cb, fed, 0, torch.zeros(1), update), torch.tensor([1.0]))
    saved = cb.state_dict()
    # Round 1 from v = 1: diffs 3, 1 -> clipped 1, 1 -> v = 2 (the rows are again y - 0).
    torch.testing.assert_close(aggregate(cb, fed, 1, torch.zeros(1), update), torch.tensor([2.0]))
    resumed, _ = _with(FedAvg(weighting="uniform"), AggregationPipeline(rule=CenteredClipping(tau=1.0)), cohort=2)
    resumed.load_state_dict(saved)
    torch.testing.assert_close(aggregate(resumed, fed, 1, torch.zeros(1), update), torch.tensor([2.0]))


def test_norm_clip_scales_long_rows_and_logs_the_clipped_share():
    cb, fed = _with(FedAvg(weighting="uniform"), AggregationPipeline(transforms=[NormClip(1.0)]), cohort=2)
    log = RecordingLogger()
    new_w = aggregate(cb, fed, 0, torch.zeros(2), make_update(0, [0, 1], [[3.0, 4.0], [0.3, 0.4]]), log)
    torch.testing.assert_close(new_w, torch.tensor([0.45, 0.6]))  # mean of [0.6, 0.8] and [0.3, 0.4]
    assert {"robust/clipped_fraction": 0.5} in [m for m, _ in log.scalars]


def test_buckets_of_one_row_leave_the_weighted_mean():
    own, fed = _with(FedAvg(), None)
    bucketed, _ = _with(FedAvg(), AggregationPipeline(pre_aggregator=Bucketing(bucket_size=1)))
    torch.testing.assert_close(aggregate(bucketed, fed, 0, GLOBAL, _update()), aggregate(own, fed, 0, GLOBAL, _update()))


def test_a_pipeline_server_optimizer_is_the_callbacks_own_stage():
    # FedAvg weights + ServerAdam is FedAdam, round after round.
    fedadam, fed = _with(FedAdam(lr=0.1), None)
    composed, _ = _with(FedAvg(), AggregationPipeline(server_optimizer=ServerAdam(lr=0.1)))
    w_a = w_b = GLOBAL
    for round_idx in range(3):
        w_a = aggregate(fedadam, fed, round_idx, w_a, _update(round_idx))
        w_b = aggregate(composed, fed, round_idx, w_b, _update(round_idx))
        assert torch.equal(w_a, w_b)


def test_a_rule_that_ignores_the_weights_warns_once_naming_the_algorithm():
    cb, fed = _with(FedAvg(), AggregationPipeline(rule=Median()))
    with pytest.warns(UserWarning, match="Median ignores FedAvg's client weights"):
        aggregate(cb, fed, 0, GLOBAL, _update())


def test_a_small_cohort_lowers_f_and_falls_back_to_the_median(recwarn):
    cb, fed = _with(FedAvg(weighting="uniform"), AggregationPipeline(rule=Krum(), f=1), cohort=5)
    log = RecordingLogger()
    # 4 rows cannot hold f = 1 (K > 2f + 2) but hold f = 0: Krum with 2 neighbours.
    aggregate(cb, fed, 0, torch.zeros(1), make_update(0, [0, 1, 2, 3], [[0.0], [1.0], [2.0], [9.0]]), log)
    assert {"robust/f_effective": 0.0} in [m for m, _ in log.scalars]
    # 2 rows hold no f: the coordinate median, the mean of the two.
    new_w = aggregate(cb, fed, 1, torch.zeros(1), make_update(1, [0, 1], [[0.0], [1.0]]), log)
    torch.testing.assert_close(new_w, torch.tensor([0.5]))
    assert any("using the coordinate median" in str(w.message) for w in recwarn)


@pytest.mark.parametrize(("pipeline", "cohort", "message"), [
    (lambda: AggregationPipeline(rule=Krum(), f=1), 4,
     "model.aggregation.rule Krum needs K > 2f + 2; got K = 4 (model.clients_per_round) and f = 1 (model.aggregation.f)"),
    (lambda: AggregationPipeline(rule=Bulyan(), f_fraction=0.2), 6,
     "model.aggregation.rule Bulyan needs K >= 4f + 3; got K = 6 (model.clients_per_round) and f = 2"
     " (model.aggregation.f = ceil(f_fraction 0.2 x K))"),
    (lambda: AggregationPipeline(rule=TrimmedMean(b=2)), 4,
     "model.aggregation.rule TrimmedMean needs 2b < K; got K = 4 (model.clients_per_round) and b = 2 (its b, beta or f)"),
])
def test_impossible_rules_fail_at_set_up_naming_the_fields(pipeline, cohort, message):
    with pytest.raises(ConfigError) as err:
        pipeline().setup(cohort)
    assert str(err.value) == message


def test_bad_pipeline_values_and_combinations_fail_in_one_line():
    with pytest.raises(ConfigError, match=r"model.aggregation.f_fraction must be in \[0, 0.5\); got 0.5"):
        AggregationPipeline(f_fraction=0.5)
    with pytest.raises(ConfigError, match="model.aggregation: FedDyn's server step is not a weighted mean"):
        FedDyn().use_pipeline(AggregationPipeline(rule=Median()))
    with pytest.raises(ConfigError, match="model.aggregation.server_optimizer: FedAvgM has its own server step"):
        FedAvgM().use_pipeline(AggregationPipeline(server_optimizer=ServerAdam()))
    with pytest.raises(ConfigError, match="model.aggregation.server_optimizer: FedFa has its own server step"):
        FedFa().use_pipeline(AggregationPipeline(server_optimizer=ServerAdam()))
    FedDyn().use_pipeline(AggregationPipeline(rule=Mean()))  # the identity composes with anything
