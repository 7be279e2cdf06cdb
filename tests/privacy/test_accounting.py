"""Accounting against published numbers and against dp-accounting called directly (docs/algorithms.md, Client-level differential privacy)."""

from __future__ import annotations

import dp_accounting
import pytest
import torch
from dp_accounting import pld, rdp

from lightning_fl.aggregation import AggregationPipeline
from lightning_fl.faults.validation import ConfigError
from lightning_fl.privacy import DifferentialPrivacy
from lightning_fl.privacy.accounting import (
    calibrate_fixed_size_noise,
    calibrate_noise,
    epsilon,
    fixed_size_epsilon,
    ledger_epsilon,
    local_epsilon,
    update_noise_multiplier,
)

#: TF Privacy compute_dp_sgd_privacy_test.py's orders.
TF_ORDERS = [1.25, 1.5, 1.75, 2, 2.25, 2.5, 3, 3.5, 4, 4.5] + list(range(5, 64)) + [128, 256, 512]


@pytest.mark.parametrize(("q", "z", "rounds", "delta", "published"), [
    (150 / 60000, 1.3, 6000, 1e-5, 0.7242234026109595),
    (100 / 100000, 1.0, 30000, 1e-7, 1.4154988495444845),
])
def test_published_tf_privacy_cases(q: float, z: float, rounds: int, delta: float, published: float) -> None:
    assert epsilon(q, z, rounds, delta, "rdp", TF_ORDERS) == pytest.approx(published, abs=1e-9)


def test_regression_values_of_dp_accounting_0_6_0() -> None:
    assert epsilon(0.1, 1.0, 100, 1e-3, "rdp") == pytest.approx(5.655053, abs=1e-6)
    assert epsilon(0.1, 1.0, 100, 1e-3, "pld") == pytest.approx(4.784350, abs=1e-6)
    assert epsilon(150 / 60000, 1.3, 6000, 1e-5) == pytest.approx(0.640111, abs=1e-6)
    assert epsilon(100 / 100000, 1.0, 30000, 1e-7) == pytest.approx(1.098200, abs=1e-6)
    assert fixed_size_epsilon(1000, 100, 1.0, 100, 1e-3) == pytest.approx(79.33, abs=5e-3)


def test_against_dp_accounting_called_directly() -> None:
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.05, dp_accounting.GaussianDpEvent(0.8)), 37)
    for accountant, make in (("pld", pld.PLDAccountant), ("rdp", rdp.RdpAccountant)):
        direct = make(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
        direct.compose(event)
        assert epsilon(0.05, 0.8, 37, 1e-4, accountant) == direct.get_epsilon(1e-4)


def test_the_cached_rdp_epsilons_equal_a_fresh_accountant_bitwise() -> None:
    # Every round asks for epsilon after t rounds; the RDP paths reuse one release's RDP vector, which must
    # give exactly what a fresh RdpAccountant composed with the whole ledger gives, at every t.
    relation = dp_accounting.NeighboringRelation
    for rounds in (1, 2, 37, 500):
        direct = rdp.RdpAccountant(neighboring_relation=relation.ADD_OR_REMOVE_ONE)
        direct.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.05, dp_accounting.GaussianDpEvent(0.8)), rounds))
        direct.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.2, dp_accounting.GaussianDpEvent(1.5)), 3))
        assert ledger_epsilon([(0.05, 0.8, rounds), (0.2, 1.5, 3)], 1e-4, "rdp") == direct.get_epsilon(1e-4)
        fixed = rdp.RdpAccountant(neighboring_relation=relation.REPLACE_ONE)
        fixed.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.SampledWithoutReplacementDpEvent(
            1000, 100, dp_accounting.GaussianDpEvent(0.5)), rounds))
        assert fixed_size_epsilon(1000, 100, 1.0, rounds, 1e-3) == fixed.get_epsilon(1e-3)
        local = rdp.RdpAccountant(neighboring_relation=relation.REPLACE_ONE)
        local.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(2.0), rounds))
        assert local_epsilon(4.0, rounds, 1e-3) == local.get_epsilon(1e-3)


def test_a_ledger_of_two_segments_is_their_composition() -> None:
    direct = pld.PLDAccountant()
    direct.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(1.0)), 3))
    direct.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.2, dp_accounting.GaussianDpEvent(1.5)), 4))
    assert ledger_epsilon([(0.1, 1.0, 3), (0.2, 1.5, 4)], 1e-3) == pytest.approx(direct.get_epsilon(1e-3), rel=1e-9)
    # A ledger split at a resume gives the epsilon of the uninterrupted run.
    assert ledger_epsilon([(0.1, 1.0, 2), (0.1, 1.0, 2)], 1e-3) == pytest.approx(epsilon(0.1, 1.0, 4, 1e-3), rel=1e-9)


def test_calibration_matches_the_spec_values_and_the_package() -> None:
    assert calibrate_noise(2.0, 1e-3, 100, 0.1, "rdp") == pytest.approx(1.857446, abs=1e-5)
    z = calibrate_noise(2.0, 1e-3, 100, 0.1, "pld")
    assert z == pytest.approx(1.673949, abs=1e-5)
    direct = pld.PLDAccountant()
    direct.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(z)), 100))
    assert direct.get_epsilon(1e-3) <= 2.0


def test_adaptive_clipping_update_multiplier() -> None:
    # (1 - 1/100)^(-1/2) by hand.
    assert update_noise_multiplier(1.0, 5.0) == pytest.approx(0.99 ** -0.5, rel=1e-12)
    assert update_noise_multiplier(1.0, 5.0) == pytest.approx(1.005038, abs=1e-6)
    with pytest.raises(ConfigError, match="count_noise"):
        update_noise_multiplier(1.0, 0.5)


def test_bad_input_is_one_line() -> None:
    for call, field in ((lambda: epsilon(0.1, 1.0, 3, 0.0), "model.dp.delta"),
                        (lambda: epsilon(0.1, 1.0, 3, 1.0), "model.dp.delta"),
                        (lambda: calibrate_noise(0.0, 1e-3, 10, 0.1), "model.dp.target_epsilon"),
                        (lambda: calibrate_noise(-1.0, 1e-3, 10, 0.1), "model.dp.target_epsilon"),
                        (lambda: calibrate_noise(1e-4, 1e-5, 100, 0.1, "rdp"), "not reachable")):
        with pytest.raises(ConfigError, match=field) as info:
            call()
        assert "\n" not in str(info.value)


def test_no_rounds_spend_nothing_and_no_noise_spends_everything() -> None:
    assert epsilon(0.1, 1.0, 0, 1e-3) == 0.0
    assert epsilon(0.1, 0.0, 1, 1e-3) == float("inf")


def test_fixed_size_calibration_reaches_its_target_in_the_replace_one_accountant():
    z = calibrate_fixed_size_noise(100, 10, 8.0, 1e-3, 20)
    direct = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    direct.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(100, 10, dp_accounting.GaussianDpEvent(z / 2)), 20))
    assert direct.get_epsilon(1e-3) == pytest.approx(8.0, rel=1e-3)


def test_a_fixed_size_run_spends_its_target_over_the_planned_rounds():
    dp = DifferentialPrivacy(target_epsilon=8.0, delta=1e-3, sampling="fixed")
    dp.setup(100, 10, torch.full((100,), 10), 20)
    dp.install(AggregationPipeline(), "FedAvg", {}, [], hierarchy=False, sampling="uniform")
    for _ in range(20):
        dp.noise.record()
    direct = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    direct.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(100, 10, dp_accounting.GaussianDpEvent(dp.z / 2)), 20))
    assert dp.epsilon() == direct.get_epsilon(1e-3) == pytest.approx(8.0, rel=1e-3)
