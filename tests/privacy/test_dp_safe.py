"""DP-safe FedFa, q-FFL, DWFed, IGFL-C and FedNova: what each may read, over a fixed denominator, by hand."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch

from lightning_fl.aggregation import AggregationPipeline
from lightning_fl.callbacks import DWFed, FedFa, FedNova, IGFLClient, QFFL
from lightning_fl.faults.validation import ConfigError
from lightning_fl.privacy import DifferentialPrivacy
from lightning_fl.privacy.mechanism import dp_safe_fedfa_weights
from tests.callbacks.helpers import aggregate, fake_federation, make_update, prepared, vector_layout

GLOBAL = torch.tensor([1.0, -1.0, 0.5])
ROWS = [[2.0, -1.0, 0.5], [1.0, 0.0, 0.5]]  # u = (1, 0, 0) and (0, 1, 0)


def _under_dp(callback, name: str, args: dict, label_hist=None):
    fed = dataclasses.replace(fake_federation(vector_layout(3), num_clients=4, label_hist=label_hist),
                              clients_per_round=2)
    callback = prepared(callback, fed)
    dp = DifferentialPrivacy(noise_multiplier=0.0, clip_norm=10.0, delta=1e-3)
    dp.setup(4, 2, torch.full((4,), 10), 5)
    pipeline = AggregationPipeline()
    dp.install(pipeline, name, args, [], hierarchy=False, sampling="uniform",
               own_weights=callback.dp_own_weights)
    pipeline.setup(2)
    callback.use_pipeline(pipeline)
    return callback, fed


def test_bounded_fedfa_weights_by_hand():
    # t + 1 = 4. I(0.25) = 2/10, I(1) = 0; 1 - 0/4 = 1 -> 0, 1 - 2/4 = 1/2 -> 1/10.
    got = dp_safe_fedfa_weights(torch.tensor([0.25, 1.0]), torch.tensor([0, 2]), 3, 0.5, 0.5)
    torch.testing.assert_close(got, torch.tensor([0.1, 0.05], dtype=torch.float64))
    # Accuracy 0 and a client in every past round both reach the bound I = 1.
    assert dp_safe_fedfa_weights(torch.tensor([0.0]), torch.tensor([4]), 3, 0.5, 0.5).item() == 1.0


def test_dp_safe_fedfa_sums_its_own_weights_over_q_n():
    callback, fed = _under_dp(FedFa(server_momentum=0.0, train_acc="running", dp_safe=True), "FedFa", {"dp_safe": True})
    # Round t = 2 (t + 1 = 3); participation (1, 3) counts this round: past (0, 2). Accuracies 0.5: I = 1/10.
    # a = (0.5/10 + 0.5 I(1), 0.5/10 + 0.5 I(1/3)) with I(1/3) = log2(3)/10; qN = 2.
    a = (0.05, 0.05 + 0.5 * math.log2(3) / 10)
    update = make_update(2, [0, 3], ROWS, participation=[1, 3])
    new_w = aggregate(callback, fed, 2, GLOBAL, update)
    torch.testing.assert_close(new_w, GLOBAL + torch.tensor([a[0], a[1], 0.0]) / 2)


def test_dp_safe_qffl_sums_capped_losses_over_q_n():
    callback, fed = _under_dp(QFFL(q=2.0, dp_safe=True, f_max=2.0), "QFFL", {"dp_safe": True})
    # a = (min(F, 2) / 2)^2: 0.5 -> 1/16, 4 -> 1; qN = 2.
    update = make_update(0, [0, 3], ROWS, loss_before=[0.5, 4.0])
    new_w = aggregate(callback, fed, 0, GLOBAL, update)
    torch.testing.assert_close(new_w, GLOBAL + torch.tensor([0.0625, 1.0, 0.0]) / 2)


def test_dp_safe_dwfed_weighs_own_labels_against_a_uniform_population_over_q_n():
    hist = torch.tensor([[5, 5, 0], [2, 2, 2], [0, 0, 9], [3, 3, 3]])
    callback, fed = _under_dp(DWFed(dp_safe=True), "DWFed", {"dp_safe": True}, label_hist=hist)
    # Client 0: p = (1/2, 1/2, 0), D = 1/6 + 1/6 + 1/3 = 2/3; client 3: D = 0. K := 2 (qN), eta = 1.
    # ISH_0 = (1 - (2/3)/2) / (1 + 2/3) = 0.4, ISH_3 = 1; the denominator qN = 2.
    update = make_update(0, [0, 3], ROWS)
    new_w = aggregate(callback, fed, 0, GLOBAL, update)
    torch.testing.assert_close(new_w, GLOBAL + torch.tensor([0.4, 1.0, 0.0]) / 2)


def test_dp_safe_igfl_c_corrects_with_the_expected_cohort_not_the_realised_one():
    fed = dataclasses.replace(fake_federation(vector_layout(3), num_clients=4), clients_per_round=3)
    realised = SimpleNamespace(cohort_size=1)  # a Poisson round that drew one client
    assert prepared(IGFLClient(dp_safe=True), fed).group_size(realised) == 3
    assert prepared(IGFLClient(), fed).group_size(realised) == 1


def test_dp_safe_fednova_scales_the_clipped_normalised_sum_by_a_constant_tau_eff():
    callback, fed = _under_dp(FedNova(dp_safe=True, tau_eff=3.0), "FedNova", {"dp_safe": True, "tau_eff": 3.0})
    # Plain SGD: a_k = tau_k = (2, 4) local steps, d_k = u_k / a_k = (0.5, 0, 0), (0, 0.25, 0); a_k = 1 and
    # qW = 2 (DP weights); w + 3 * (0.5, 0.25, 0) / 2.
    update = make_update(0, [0, 3], ROWS, num_steps=[2, 4])
    new_w = aggregate(callback, fed, 0, GLOBAL, update)
    torch.testing.assert_close(new_w, GLOBAL + 3.0 * torch.tensor([0.5, 0.25, 0.0]) / 2)


def test_dp_safe_variants_need_central_dp_and_q_ffl_its_bound():
    with pytest.raises(ConfigError, match="f_max"):
        QFFL(dp_safe=True)
    with pytest.raises(ConfigError, match="tau_eff"):
        FedNova(dp_safe=True)
    dp = DifferentialPrivacy(noise_multiplier=1.0, local=True, delta=1e-3)
    dp.setup(4, 2, torch.full((4,), 10), 5)
    with pytest.raises(ConfigError, match="model.dp.local: FedFa's DP-safe form is for central DP"):
        dp.install(AggregationPipeline(), "FedFa", {"dp_safe": True}, [], hierarchy=False,
                   sampling="uniform", own_weights=True)
