"""Local DP: each client clips and noises its own row (keyed per client); any rule may follow; its own ledger."""

from __future__ import annotations

import dp_accounting
import pytest
import torch
from dp_accounting import rdp

from lightning_fl.aggregation import AggregationPipeline, Median
from lightning_fl.aggregation.stage import StageContext
from lightning_fl.faults.validation import ConfigError
from lightning_fl.privacy import DifferentialPrivacy
from tests.callbacks.helpers import RecordingLogger


def _ctx(ids, round_idx=0):
    return StageContext(round_idx, torch.tensor(ids), torch.zeros(1), 0, 0, RecordingLogger(), lambda *a: None)


def _local(z=2.0, clip=0.5, num_clients=4, rule=None, **kwargs):
    dp = DifferentialPrivacy(noise_multiplier=z, clip_norm=clip, local=True, delta=1e-3, **kwargs)
    dp.setup(num_clients, 2, torch.full((num_clients,), 10), 5)
    pipeline = AggregationPipeline(rule=rule)
    dp.install(pipeline, "FedAvg", {"weighting": "uniform"}, [], hierarchy=False, sampling="uniform")
    return dp, pipeline


def test_each_client_clips_then_adds_its_own_keyed_noise():
    dp, pipeline = _local(z=2.0, clip=0.5)
    stage = pipeline.transforms[-1]
    rows = torch.zeros(2, 20000)
    rows[0, 0] = 10.0  # clipped to norm 0.5
    both = stage.transform(rows, _ctx([1, 3]))
    alone = stage.transform(rows[1:], _ctx([3]))
    assert torch.equal(both[1], alone[0])  # client 3's noise does not depend on who else is in the cohort
    # Noise std z_L C = 1 (20 000 draws: within 2%); client 1's first coordinate is 0.5 plus its noise.
    assert float(both[1].std()) == pytest.approx(1.0, rel=0.02)
    noise_1 = both[0] - torch.nn.functional.one_hot(torch.tensor(0), 20000).float() * 0.5
    assert float(noise_1.std()) == pytest.approx(1.0, rel=0.02)
    assert stage.participations.tolist() == [0, 1, 0, 2]


def test_a_robust_rule_may_follow_local_dp_but_not_central_dp():
    _local(rule=Median())  # allowed: the rule post-processes noised rows
    with pytest.raises(ConfigError, match="model.aggregation.rule: Median"):
        dp = DifferentialPrivacy(noise_multiplier=1.0, delta=1e-3)
        dp.setup(4, 2, torch.full((4,), 10), 5)
        dp.install(AggregationPipeline(rule=Median()), "FedAvg", {}, [], hierarchy=False,
                   sampling="uniform")


def test_sample_weights_need_public_sizes_under_local_dp():
    dp = DifferentialPrivacy(noise_multiplier=1.0, local=True, delta=1e-3)
    dp.setup(4, 2, torch.full((4,), 10), 5)
    with pytest.raises(ConfigError, match="public_sizes"):
        dp.install(AggregationPipeline(), "FedAvg", {"weighting": "samples"}, [], hierarchy=False,
                   sampling="uniform")
    dp = DifferentialPrivacy(noise_multiplier=1.0, local=True, public_sizes=True, delta=1e-3)
    dp.setup(4, 2, torch.full((4,), 10), 5)
    dp.install(AggregationPipeline(), "FedAvg", {"weighting": "samples"}, [], hierarchy=False,
               sampling="uniform")


def test_the_local_ledger_is_the_most_released_clients_replace_one_epsilon():
    dp, pipeline = _local(z=2.0, clip=0.5)
    stage = pipeline.transforms[-1]
    for t in range(3):
        stage.transform(torch.zeros(2, 3), _ctx([1, 2] if t else [2, 3], t))
    log = RecordingLogger()
    dp.log_round(log)
    direct = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    direct.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(1.0), 3))  # client 2: 3 releases
    assert log.scalars[0][0]["dp/local_epsilon_max"] == pytest.approx(direct.get_epsilon(1e-3), rel=1e-12)
