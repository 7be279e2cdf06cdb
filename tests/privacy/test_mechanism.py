"""Central DP stages against hand computations: clipping, the fixed denominator, the noise scale, FedAvg at sigma 0."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fl.aggregation import AggregationPipeline, NormClip
from lightning_fl.callbacks import FedAvg
from lightning_fl.privacy import AdaptiveClipping, DifferentialPrivacy
from lightning_fl.privacy.mechanism import next_clip_norm, noised_unclipped_fraction
from lightning_fl.state.seeding import derive_seed
from tests.callbacks.helpers import RecordingLogger, aggregate, fake_federation, make_update, prepared, vector_layout

GLOBAL = torch.tensor([1.0, -1.0, 0.5])


def _dp_fedavg(dp: DifferentialPrivacy | None, sizes=(10, 10, 10, 10), cohort: int = 2, rounds: int = 10,
               pipeline: AggregationPipeline | None = None):
    """FedAvg (uniform) over 4 clients of dimension 3, with ``dp`` installed as a run installs it."""
    fed = fake_federation(vector_layout(3), num_clients=len(sizes))
    callback = prepared(FedAvg(weighting="uniform"), fed)
    pipeline = pipeline if pipeline is not None else AggregationPipeline()
    if dp is not None:
        dp.setup(len(sizes), cohort, torch.tensor(sizes), rounds)
        dp.install(pipeline, "FedAvg", {"weighting": "uniform"}, [], hierarchy=False, sampling="uniform")
    pipeline.setup(cohort)
    callback.use_pipeline(pipeline)
    return callback, fed


def _rows(*deltas):
    return [[g + d for g, d in zip(GLOBAL.tolist(), delta)] for delta in deltas]


def test_clipping_and_the_fixed_denominator_by_hand():
    # q = 2/4, a_k = 1, W = 4: D = qW = 2. ||(3, 4, 0)|| = 5 -> (0.6, 0.8, 0); (0.3, 0.4, 0) has norm 0.5 <= 1.
    dp = DifferentialPrivacy(noise_multiplier=0.0, clip_norm=1.0, delta=1e-3)
    callback, fed = _dp_fedavg(dp)
    update = make_update(0, [0, 3], _rows((3.0, 4.0, 0.0), (0.3, 0.4, 0.0)))
    new_w = aggregate(callback, fed, 0, GLOBAL, update)
    torch.testing.assert_close(new_w, GLOBAL + torch.tensor([0.45, 0.6, 0.0]))


def test_capped_sample_weights_and_the_clipped_denominator_by_hand():
    # n_cap = 20: a = (0.25, 0.5, 1, 1), W = 2.75, q = 0.5: f_f divides by 1.375.
    rows = _rows((1.0, 0.0, 0.0), (0.0, 1.0, 0.0))
    dp = DifferentialPrivacy(noise_multiplier=0.0, clip_norm=10.0, weight_cap=20, delta=1e-3)
    callback, fed = _dp_fedavg(dp, sizes=(5, 10, 40, 20))
    new_w = aggregate(callback, fed, 0, GLOBAL, make_update(0, [0, 1], rows))
    torch.testing.assert_close(new_w, GLOBAL + torch.tensor([0.25, 0.5, 0.0]) / 1.375)
    # f_c with W_min = 1: max(q W_min, a_0 + a_1) = max(0.5, 0.75) = 0.75.
    dp = DifferentialPrivacy(noise_multiplier=0.0, clip_norm=10.0, weight_cap=20, estimator="f_c", min_weight=1.0,
                             delta=1e-3)
    callback, fed = _dp_fedavg(dp, sizes=(5, 10, 40, 20))
    new_w = aggregate(callback, fed, 0, GLOBAL, make_update(0, [0, 1], rows))
    torch.testing.assert_close(new_w, GLOBAL + torch.tensor([0.25, 0.5, 0.0]) / 0.75)


def test_sigma_zero_and_no_clipping_is_fedavg_bitwise():
    rows = _rows((0.1, 0.2, -0.3), (1.5, -2.0, 0.25), (-0.7, 0.0, 3.0))
    update = make_update(0, [0, 1, 3], rows)
    # Fixed-size sampling of K = 3: the denominator is K, FedAvg's uniform weights 1/K.
    dp = DifferentialPrivacy(noise_multiplier=0.0, clip_norm=math.inf, sampling="fixed", delta=1e-3)
    private, fed = _dp_fedavg(dp, cohort=3)
    # FedAvg's own weights through the same generic path (a clip no row reaches changes nothing).
    plain, _ = _dp_fedavg(None, cohort=3, pipeline=AggregationPipeline(transforms=[NormClip(1e30)]))
    identity, _ = _dp_fedavg(None, cohort=3)
    got = aggregate(private, fed, 0, GLOBAL, update)
    assert torch.equal(got, aggregate(plain, fed, 0, GLOBAL, update))
    torch.testing.assert_close(got, aggregate(identity, fed, 0, GLOBAL, update), rtol=1e-6, atol=1e-7)


def _noise_draws(dp: DifferentialPrivacy, rounds: int, dim: int = 2000) -> torch.Tensor:
    fed = fake_federation(vector_layout(dim), num_clients=4)
    callback = prepared(FedAvg(weighting="uniform"), fed)
    pipeline = AggregationPipeline()
    dp.setup(4, 2, torch.full((4,), 10), rounds)
    dp.install(pipeline, "FedAvg", {}, [], hierarchy=False, sampling="uniform")
    pipeline.setup(2)
    callback.use_pipeline(pipeline)
    zero = torch.zeros(dim)
    draws = [aggregate(callback, fed, t, zero, make_update(t, [0, 1], [[0.0] * dim] * 2)) for t in range(rounds)]
    return torch.stack(draws)


def test_the_noise_std_is_z_c_over_qw_over_many_draws():
    # z = 3, C = 0.5, q = 1/2, W = 4: std = 3 * 0.5 / 2 = 0.75; 40 000 draws: the sample std is within 1%.
    draws = _noise_draws(DifferentialPrivacy(noise_multiplier=3.0, clip_norm=0.5, delta=1e-3), 20)
    assert float(draws.std()) == pytest.approx(0.75, rel=0.01)
    assert abs(float(draws.mean())) < 0.75 * 4 / math.sqrt(draws.numel())
    # f_c: std = 2 z C / (q W_min) = 2 * 3 * 0.5 / (0.5 * 2) = 3.
    draws = _noise_draws(DifferentialPrivacy(noise_multiplier=3.0, clip_norm=0.5, estimator="f_c", min_weight=2.0,
                                             delta=1e-3), 20)
    assert float(draws.std()) == pytest.approx(3.0, rel=0.01)


def test_the_noise_is_keyed_by_seed_and_round_only():
    a = _noise_draws(DifferentialPrivacy(noise_multiplier=1.0, delta=1e-3), 3, dim=50)
    b = _noise_draws(DifferentialPrivacy(noise_multiplier=1.0, delta=1e-3), 3, dim=50)
    assert torch.equal(a, b) and not torch.equal(a[0], a[1])


def test_an_empty_round_releases_the_model_plus_noise_and_counts():
    dp = DifferentialPrivacy(noise_multiplier=2.0, clip_norm=1.0, delta=1e-3)
    callback, fed = _dp_fedavg(dp)
    log = RecordingLogger()
    new_w = callback.aggregate_empty(0, GLOBAL, fed, log)
    # The draw is the one a non-empty round 0 would add: N(0, 1) of the keyed stream, times z C / qW = 1.
    expected = GLOBAL + torch.randn(3, generator=torch.Generator().manual_seed(
        derive_seed(0, 0, "dp_noise")))
    torch.testing.assert_close(new_w, expected)
    assert dp.noise.segments() == [(0.5, 2.0, 1)]


def test_adaptive_clipping_by_hand():
    # gamma = 0.5, eta = 0.2: every update fit (b = 1) -> C shrinks by exp(-0.1); none fit -> grows by exp(0.1).
    assert next_clip_norm(2.0, 1.0, 0.5, 0.2) == pytest.approx(2.0 * math.exp(-0.1))
    assert next_clip_norm(2.0, 0.0, 0.5, 0.2) == pytest.approx(2.0 * math.exp(0.1))
    # Without noise: b = (1, 1, 0) over m = 4 -> ((1 - 0.5) + (1 - 0.5) + (0 - 0.5)) / 4 + 0.5 = 0.625.
    assert noised_unclipped_fraction(torch.tensor([True, True, False]), 0.0, 4.0, 0, 0, "dp_count") == 0.625
    dp = DifferentialPrivacy(noise_multiplier=0.0, clip_norm=1.0, delta=1e-3,
                             adaptive=AdaptiveClipping(count_noise=1e-9))
    callback, fed = _dp_fedavg(dp)
    # Both rows fit C_0 = 1: b̄ = (2 - 1)/2 + 1/2 = 1 (m = qN = 2), so C_1 = exp(-0.2 (1 - 0.5)).
    aggregate(callback, fed, 0, GLOBAL, make_update(0, [0, 3], _rows((0.1, 0.0, 0.0), (0.0, 0.2, 0.0))))
    assert dp.noise.clip.clip_norm == pytest.approx(math.exp(-0.1), rel=1e-6)


def test_a_second_set_up_installs_the_stages_once():
    # Lightning sets the loop up for each stage (fit, then validate or test) in one process.
    dp = DifferentialPrivacy(noise_multiplier=1.0, delta=1e-3)
    pipeline = AggregationPipeline(transforms=[NormClip(5.0)])
    for _ in range(2):
        dp.setup(4, 2, torch.full((4,), 10), 5)
        dp.install(pipeline, "FedAvg", {}, [], hierarchy=False, sampling="uniform")
    assert [type(t).__name__ for t in pipeline.transforms] == ["NormClip", "DPClip"]
    assert type(pipeline.rule).__name__ == "DPSum" and len(pipeline.aggregate_transforms) == 1
